"""Device profiles: one JSON data file per device class, plus CPU feature detection on the device."""

from .detect import CpuInfo, detect_cpu
from .profile import DeviceProfile, ProfileError, available_profiles, load_profile

__all__ = ["CpuInfo", "DeviceProfile", "ProfileError", "available_profiles", "detect_cpu", "load_profile"]
