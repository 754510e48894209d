"""Device profiles (issue 13, first slice): the typed schema and its shipped data, detection from recorded
machines, variant selection per profile, the ``cuvil-edge profiles`` CLI, and the check at signing."""

from __future__ import annotations

import copy
import json
import struct
from dataclasses import FrozenInstanceError, replace
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.cli import main
from cuvil_edge.signing import SigningError, build_bundle, make_manifest
from device_profiles import (
    SIMD_FEATURES,
    Caches,
    Cores,
    HostInputs,
    ProfileError,
    Thermal,
    available_profiles,
    closest_profile,
    describe,
    detect,
    load_profile,
    load_profiles,
    profile_from_dict,
)
from device_profiles.detect import (
    ARM64_HWCAPS,
    AT_HWCAP,
    AT_HWCAP2,
    CPUINFO_FEATURES,
    arm64_features,
    cpuinfo_features,
    parse_auxv,
    parse_caches,
    parse_cores,
    parse_cpuinfo,
    parse_meminfo,
    parse_size,
    parse_thermal,
)
from runtime_wasm import NoUsableVariant, RuntimePolicy, VariantSpec
from runtime_wasm.variants import EngineProbes, HostProbes, select_variant

FIXTURES = Path(__file__).parent / "fixtures" / "cpu"
SHIPPED = ["generic-arm64", "generic-x86-64", "jetson-orin-nano", "raspberry-pi-4", "raspberry-pi-5",
           "x86-64-avx2", "x86-64-avx512"]
VARIANTS = (
    VariantSpec("f32-wasmsimd-x86", "simd128", "x86", "a.wasm"),
    VariantSpec("f32-wasmrelaxedsimd-x86", "relaxed", "x86", "b.wasm"),
    VariantSpec("f32-wasmsimd-arm", "simd128", "arm", "c.wasm"),
    VariantSpec("f32-wasmrelaxedsimd-arm", "relaxed", "arm", "d.wasm"),
)


def shipped_table(name: str) -> dict:
    return json.loads(resources.files("device_profiles").joinpath("data", f"{name}.json").read_text())


# -- 1. schema and shipped data ----------------------------------------------------------------------
def test_every_device_class_ships_one_valid_profile():
    assert available_profiles() == SHIPPED
    for p in load_profiles():
        assert p.family == {"aarch64": "arm", "x86_64": "x86"}[p.arch]
        assert p.features and p.features <= SIMD_FEATURES[p.family]
        assert isinstance(p.policy, RuntimePolicy) and p.policy.max_cpu_temp_c <= p.thermal.limit_c
        assert 1 <= p.threads <= p.cores.total and p.description
    with pytest.raises(FrozenInstanceError):
        load_profile("raspberry-pi-4").threads = 1  # type: ignore[misc]


def test_published_board_figures():
    pi4, pi5, orin = (load_profile(n) for n in ("raspberry-pi-4", "raspberry-pi-5", "jetson-orin-nano"))
    assert pi4.features == {"neon"} and pi4.caches == Caches(32 << 10, 1 << 20, 0) and pi4.memory_mb == 4096
    assert pi5.features == {"neon", "dotprod", "fp16"} and pi5.caches == Caches(64 << 10, 512 << 10, 2 << 20)
    assert orin.cores == Cores(6, 0) and orin.caches.l2_bytes == 256 << 10
    assert "avx512vnni" in load_profile("x86-64-avx512").features
    assert "avx2" not in load_profile("generic-x86-64").features


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.update(colour="red"), r"unknown field\(s\) \['colour'\]"),
    (lambda t: t["cores"].update(medium=2), r"unknown field\(s\) \['cores.medium'\]"),
    (lambda t: t.pop("thermal"), r"missing field\(s\) \['thermal'\]"),
    (lambda t: t["cores"].update(big="4"), "cores.big must be int, got '4'"),
    (lambda t: t.update(threads=True), "threads must be int, got True"),
    (lambda t: t.update(memory_mb=8192.0), "memory_mb must be int"),
    (lambda t: t.update(relaxed_simd="yes"), "relaxed_simd must be bool"),
    (lambda t: t.update(features="neon"), "features must be a list of strings"),
    (lambda t: t.update(features=["neon", "neon"]), "features lists a value twice"),
    (lambda t: t.update(features=["neon", "avx2"]), r"features \['avx2'\] are not arm SIMD features"),
    (lambda t: t.update(caches=[1, 2, 3]), "caches must be a table"),
    (lambda t: t.update(arch="riscv64"), "arch must be one of"),
    (lambda t: t.update(family="x86"), "family 'x86' does not match arch 'aarch64'"),
    (lambda t: t["policy"].update(deadline_s=1), "policy: unknown setting 'deadline_s'"),
    (lambda t: t["policy"].update(deadline_ms="1s"), "policy.deadline_ms: expected float"),
    (lambda t: t["policy"].update(deadline_ms=1), "RuntimePolicy.deadline_ms must be at least p95_budget_ms"),
    (lambda t: t["policy"].update(max_cpu_temp_c=95), "above thermal.limit_c"),
    (lambda t: t["policy"].update(memory_cap_bytes=16 << 30), "memory_cap_bytes .* exceeds memory_mb"),
    (lambda t: t["thermal"].update(sensors=["thermal_zone0/temp"]), "absolute path"),
    (lambda t: t["thermal"].update(limit_c=0), r"thermal.limit_c must be in \(0, 150\)"),
    (lambda t: t.update(threads=5), "threads must be between 1 and the 4 cores"),
    (lambda t: t["cores"].update(big=0), "cores.big must be at least 1"),
])
def test_schema_errors_name_the_field(edit, message):
    table = copy.deepcopy(shipped_table("raspberry-pi-5"))
    edit(table)
    with pytest.raises(ProfileError, match=message):
        profile_from_dict(table)


def test_unknown_profile_names_list_the_known_ones():
    for name in ("generic-x86_64", "jetson-orin-nano-cpu", "../data/raspberry-pi-4"):  # old names are gone
        with pytest.raises(ProfileError, match=r"known: \['generic-arm64'"):
            load_profile(name)


# -- 2. detection ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("tree", "machine", "features", "source", "expected"), [
    ("raspberry-pi-4", "aarch64", {"neon"}, "auxv", "raspberry-pi-4"),
    ("raspberry-pi-5", "aarch64", {"neon", "dotprod", "fp16"}, "auxv", "raspberry-pi-5"),
    ("jetson-orin-nano", "aarch64", {"neon", "dotprod", "fp16"}, "auxv", "jetson-orin-nano"),
    ("desktop-i7-8700", "x86_64", {"sse4.1", "avx2", "fma"}, "cpuinfo", "x86-64-avx2"),
    ("server-xeon-8375c", "x86_64", {"sse4.1", "avx2", "fma", "avx512f", "avx512vnni"}, "cpuinfo",
     "x86-64-avx512"),
    ("ci-amd-epyc", "x86_64", {"sse4.1", "avx2", "fma", "avx512f", "avx512vnni"}, "cpuinfo", "x86-64-avx512"),
])
def test_detect_recorded_machines(tree, machine, features, source, expected):
    host = detect(FIXTURES / tree, machine)
    assert (host.features, host.feature_source, host.closest) == (features, source, expected)
    assert host.family == load_profile(expected).family and host.memory_mb > 0


def test_detect_reads_cores_caches_and_thermal_from_sysfs_and_cpuinfo():
    pi5 = detect(FIXTURES / "raspberry-pi-5", "aarch64")
    assert pi5.model == "Raspberry Pi 5 Model B Rev 1.0 (Cortex-A76)"
    assert pi5.cores == Cores(4, 0) and pi5.caches == Caches(64 << 10, 512 << 10, 2 << 20)
    assert pi5.memory_mb == 8245424 // 1024
    assert pi5.thermal == Thermal(("/sys/class/thermal/thermal_zone0/temp",), 110.0)  # only a critical trip
    desktop = detect(FIXTURES / "desktop-i7-8700", "x86_64")  # 12 threads on 6 cores: cores, not threads
    assert desktop.cores == Cores(6, 0) and desktop.model.startswith("Intel(R) Core(TM) i7-8700")


@pytest.mark.parametrize("tree", ["raspberry-pi-4", "raspberry-pi-5", "jetson-orin-nano"])
def test_recorded_auxv_agrees_with_cpuinfo(tree):
    auxv = parse_auxv((FIXTURES / tree / "proc/self/auxv").read_bytes())
    flags = parse_cpuinfo((FIXTURES / tree / "proc/cpuinfo").read_text()).flags
    assert arm64_features(auxv) == cpuinfo_features("arm", flags)


def test_arm_features_come_from_auxv_because_cpuinfo_lies_under_qemu_user_mode():
    # qemu-aarch64 on an x86 build host: /proc/cpuinfo is the host's, the auxiliary vector the guest's
    inputs = HostInputs(machine="aarch64", cpuinfo=(FIXTURES / "ci-amd-epyc/proc/cpuinfo").read_text(),
                        auxv=(FIXTURES / "raspberry-pi-5/proc/self/auxv").read_bytes())
    host = describe(inputs, load_profiles())
    assert (host.family, host.features, host.feature_source) == ("arm", {"neon", "dotprod", "fp16"}, "auxv")
    assert host.closest == "raspberry-pi-5"


def test_parse_auxv_decodes_hwcap_bits():
    asimd, fphp, asimdhp, asimddp, i8mm = 1 << 1, 1 << 9, 1 << 10, 1 << 20, 1 << 13
    words = [(AT_HWCAP, asimd | fphp | asimdhp | asimddp), (AT_HWCAP2, i8mm), (0, 0), (AT_HWCAP2, 0)]
    data = b"".join(struct.pack("<QQ", t, v) for t, v in words) + b"\x01\x02"  # after AT_NULL: ignored
    auxv = parse_auxv(data)
    assert auxv == {AT_HWCAP: asimd | fphp | asimdhp | asimddp, AT_HWCAP2: i8mm}
    assert arm64_features(auxv) == {"neon", "fp16", "dotprod", "i8mm"}
    assert arm64_features({AT_HWCAP: asimd | fphp}) == {"neon"}  # fp16 needs scalar and vector halves
    assert parse_auxv(b"") == {} and parse_auxv(b"\x10" * 9) == {}


def test_feature_tables_cover_the_schema():
    assert set(ARM64_HWCAPS) == set(CPUINFO_FEATURES["arm"]) == SIMD_FEATURES["arm"]
    assert set(CPUINFO_FEATURES["x86"]) == SIMD_FEATURES["x86"]


def test_parse_cores_groups_big_and_little():
    rk3588 = {f"cpu{i}": {"cpu_capacity": "530" if i < 4 else "1024"} for i in range(8)}
    assert parse_cores(rk3588) == Cores(4, 4)
    by_freq = {f"cpu{i}": {"cpufreq/cpuinfo_max_freq": "1800000" if i < 4 else "2400000"} for i in range(6)}
    assert parse_cores(by_freq) == Cores(2, 4)
    smt = {f"cpu{i}": {"topology/core_id": str(i % 2), "topology/physical_package_id": "0"} for i in range(4)}
    assert parse_cores(smt) == Cores(2, 0)
    assert parse_cores({}) == Cores(0, 0)


def test_parse_sysfs_and_proc_values():
    sizes = ("32K", "2048K", "2M", "512", "", "x")
    assert [parse_size(s) for s in sizes] == [32768, 2 << 20, 2 << 20, 512, 0, 0]
    caches = {"index0": {"level": "1", "type": "Data", "size": "48K"},
              "index1": {"level": "1", "type": "Instruction", "size": "32K"},
              "index2": {"level": "2", "type": "Unified", "size": "1280K"}}
    assert parse_caches(caches) == Caches(48 << 10, 1280 << 10, 0)
    assert parse_meminfo("MemTotal:        3880348 kB\nMemFree: 1 kB\n") == 3789 and parse_meminfo("") == 0
    zones = {"thermal_zone0": {"temp": "41000",
                               "trip_point_0_type": "critical", "trip_point_0_temp": "105000",
                               "trip_point_1_type": "passive", "trip_point_1_temp": "95000"},
             "thermal_zone1": {"type": "acpitz"}}
    assert parse_thermal(zones) == Thermal(("/sys/class/thermal/thermal_zone0/temp",), 95.0)
    assert parse_thermal({}) == Thermal((), 0.0)


@pytest.mark.parametrize(("machine", "expected"),
                         [("aarch64", "generic-arm64"), ("x86_64", "generic-x86-64")])
def test_detect_tolerates_a_machine_with_nothing_to_read(tmp_path, machine, expected):
    host = detect(tmp_path, machine)
    assert (host.features, host.feature_source, host.memory_mb) == (frozenset(), "none", 0)
    assert host.caches == Caches(0, 0, 0) and host.closest == expected


def test_closest_profile_never_crosses_family():
    arm_host = describe(HostInputs(machine="aarch64"))
    assert arm_host.closest is None  # no profiles given
    assert closest_profile(arm_host, [p for p in load_profiles() if p.family == "x86"]) is None


def test_detect_this_machine():
    host = detect()
    assert host.family in ("x86", "arm") and host.closest is not None
    assert load_profile(host.closest).family == host.family


# -- 3. selection ------------------------------------------------------------------------------------
CHOSEN = {"generic-arm64": "arm", "generic-x86-64": "x86", "jetson-orin-nano": "arm", "raspberry-pi-4": "arm",
          "raspberry-pi-5": "arm", "x86-64-avx2": "x86", "x86-64-avx512": "x86"}


@pytest.mark.parametrize("name", SHIPPED)
def test_each_profile_selects_its_family_relaxed_else_simd128(name):
    assert set(CHOSEN) == set(available_profiles())
    profile, family = load_profile(name), CHOSEN[name]
    assert select_variant(VARIANTS, profile).name == f"f32-wasmrelaxedsimd-{family}"
    assert select_variant(VARIANTS, profile, engine=EngineProbes(relaxed_simd=True)).name == \
        f"f32-wasmrelaxedsimd-{family}"
    assert select_variant(VARIANTS, profile, engine=EngineProbes(relaxed_simd=False)).name == \
        f"f32-wasmsimd-{family}"
    assert select_variant(VARIANTS, HostProbes.from_profile(profile)).name == f"f32-wasmrelaxedsimd-{family}"


def test_nothing_fits_says_what_is_missing():
    only_relaxed = [v for v in VARIANTS if v.tier == "relaxed"]
    with pytest.raises(NoUsableVariant, match="only relaxed variants .*engine does not validate relaxed"):
        select_variant(only_relaxed, load_profile("raspberry-pi-5"), engine=EngineProbes(relaxed_simd=False))
    no_relaxed_build = replace(load_profile("x86-64-avx2"), relaxed_simd=False)
    with pytest.raises(NoUsableVariant, match="profile 'x86-64-avx2' says its runtime build lacks relaxed"):
        select_variant(only_relaxed, no_relaxed_build)
    with pytest.raises(NoUsableVariant, match="the caller disabled the relaxed tier"):
        select_variant(only_relaxed, HostProbes("arm", True), allow_relaxed=False)
    with pytest.raises(NoUsableVariant, match="lists no module variants"):
        select_variant([], HostProbes("arm", True))
    odd = [VariantSpec("f32-wasmfuture-arm", "future", "arm", "e.wasm")]
    with pytest.raises(NoUsableVariant, match=r"tier\(s\) \['future'\] are unknown"):
        select_variant(odd, HostProbes("arm", True))


# -- 4. CLI ------------------------------------------------------------------------------------------
def test_cli_list_show_detect(host_cli):
    listed = host_cli("profiles", "list")
    assert [line.split()[0] for line in listed.splitlines()] == SHIPPED
    shown = host_cli("profiles", "show", "raspberry-pi-5")
    for text in ("aarch64 (family arm)", "dotprod, fp16, neon", "4 big + 0 little", "L3 2.0 MiB",
                 "memory_cap_bytes=536870912", "Cortex-A76"):
        assert text in shown
    pi4 = str(FIXTURES / "raspberry-pi-4")
    detected = host_cli("profiles", "detect", "--root", pi4, "--machine", "aarch64")
    assert "neon (from auxv)" in detected and "closest profile: raspberry-pi-4" in detected
    assert "closest profile:" in host_cli("profiles", "detect")


def test_cli_unknown_profile_exits_2(capsys):
    assert main(["profiles", "show", "raspberry-pi-9"]) == 2
    assert "ProfileError" in capsys.readouterr().err


# -- 5. signing refuses unknown target profiles ------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "p",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(w, "w")])
    model = CuvilModel.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    return model.optimize(targets=[Target("simd128", "arm")]).save(tmp_path_factory.mktemp("profiles") / "m")


def test_signing_refuses_unknown_target_profiles(model_dir, tmp_path):
    manifest, _ = make_manifest(model_dir, version="1.0.0", release=1, hardware_ids=["hw"],
                                profiles=["raspberry-pi-5", "jetson-orin-nano"], golden=[])
    assert manifest["targets"]["profiles"] == ["raspberry-pi-5", "jetson-orin-nano"]
    with pytest.raises(SigningError, match=r"unknown device profile\(s\) \['raspberry-pi-9'\].*known: "
                                           r"\['generic-arm64'"):
        make_manifest(model_dir, version="1.0.0", release=1, hardware_ids=["hw"],
                      profiles=["raspberry-pi-5", "raspberry-pi-9"], golden=[])
    with pytest.raises(SigningError, match="jetson-orin-nano-cpu"):
        build_bundle(model_dir, tmp_path / "m.cvb", [], version="1.0.0", release=1, hardware_ids=["hw"],
                     profiles=["jetson-orin-nano-cpu"])
    assert not (tmp_path / "m.cvb").exists()


def test_signing_refuses_a_profile_whose_family_the_bundle_lacks(model_dir, tmp_path):
    """An arm-only build cannot be targeted at an x86 class: no variant of its family would run there."""
    with pytest.raises(SigningError, match="targets x86-64-avx2 .x86. but carries no simd128 x86 variant"):
        build_bundle(model_dir, tmp_path / "m.cvb", [], version="1.0.0", release=1, hardware_ids=["hw"],
                     profiles=["raspberry-pi-5", "x86-64-avx2"])
    assert not (tmp_path / "m.cvb").exists()
