from placement.service.plugins.dynamic_resources.device_claims import DynamicResources

__all__ = ["DynamicResources"]
