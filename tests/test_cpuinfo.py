"""One reader of ``/proc/cpuinfo`` (:mod:`metagen.cpuinfo`) for the native build, the kernels'
ISA choice and a run's provenance, on hand-written files: the first processor's fields; the
model name from the file before :func:`platform.processor` (the provenance used to prefer the
latter); ``flags``, or ``Features`` on Arm; nothing but :mod:`platform` where there is no
file."""

from __future__ import annotations

import platform
import subprocess
import sys

from metagen.cpuinfo import cpu_class, cpu_flags, cpu_identity, cpu_model, cpuinfo_fields
from metagen.eval.provenance import hardware

X86 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: Big Core 9000
flags\t\t: fpu avx2 fma avx512f
bogus line without a colon

processor\t: 1
model name\t: Little Core 100
flags\t\t: fpu avx2 fma
"""
ARM = """processor\t: 0
Features\t: fp asimd sve
CPU part\t: 0xd40
"""


def test_the_first_processor_s_fields_name_the_cpu(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(X86)
    assert cpuinfo_fields(path)["processor"] == "0"
    assert cpu_model(path) == "Big Core 9000"
    assert cpu_class(path) == "AuthenticAMD family 25 model 1"
    assert cpu_flags(path) == {"fpu", "avx2", "fma", "avx512f"}
    assert cpu_identity(path) == "model name: Big Core 9000\nflags: fpu avx2 fma avx512f"
    hw = hardware(path)
    assert hw["cpu_model"] == "Big Core 9000"
    assert hw["cpu_flags"] == {"avx2": True, "avx512f": True, "avx512bw": False,
                               "avx512_vnni": False, "amx_tile": False}


def test_arm_features_are_its_flags_and_without_a_model_name_platform_names_it(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(ARM)
    assert cpu_flags(path) == {"fp", "asimd", "sve"}
    assert cpu_model(path) == (platform.processor() or platform.machine())
    assert cpu_class(path) == cpu_model(path)  # no vendor, family, model: the model name
    assert cpu_identity(path) == "Features: fp asimd sve\nCPU part: 0xd40"


def test_without_the_file_only_platform_is_known(tmp_path):
    missing = tmp_path / "none"
    assert cpuinfo_fields(missing) == {} and cpu_flags(missing) == set()
    assert cpu_model(missing) == (platform.processor() or platform.machine())
    assert cpu_identity(missing) == f"{platform.machine()} {platform.processor()}"
    assert hardware(missing)["cpu_flags"] == dict.fromkeys(
        ("avx2", "avx512f", "avx512bw", "avx512_vnni", "amx_tile"), False)


def test_the_engine_names_the_cpu_as_provenance_does_and_provenance_loads_no_engine():
    from metagen.engine.native import build, cpu

    assert cpu.cpu_model() == hardware()["cpu_model"]
    assert build.cpu_identity is cpu.cpu_identity
    code = ("import sys, metagen.eval.provenance; "
            "assert 'metagen.engine' not in sys.modules and 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
