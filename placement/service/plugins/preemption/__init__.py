from placement.service.plugins.preemption.victim_choice import Preemption

__all__ = ["Preemption"]
