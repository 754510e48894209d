"""Device profiles: one validated JSON data file per device class, and detection of the machine it runs on."""

from .detect import DetectedHost, HostInputs, closest_profile, describe, detect, gather
from .profile import (
    SIMD_FEATURES,
    Caches,
    Cores,
    DeviceProfile,
    ProfileError,
    Thermal,
    available_profiles,
    load_profile,
    load_profiles,
    profile_from_dict,
)

__all__ = [
    "SIMD_FEATURES", "Caches", "Cores", "DetectedHost", "DeviceProfile", "HostInputs",
    "ProfileError", "Thermal", "available_profiles", "closest_profile", "describe", "detect", "gather",
    "load_profile", "load_profiles", "profile_from_dict",
]
