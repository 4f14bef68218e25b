from placement.service.plugins.gangs.gang_points import Gangs

__all__ = ["Gangs"]
