"""A committed run re-runs to the same records on today's code (results/repro/README.md).

Exact replay is a promise of one machine: XLA:CPU compiles for the host's instruction set and cores
(``prs.rl.provenance.machine_fingerprint``), so an AVX2-only machine rounds differently from the
AVX-512 one that recorded the run. On a machine whose fingerprint matches the record's the re-run
must be bit-identical; on any other, two fresh re-runs must be identical to each other
(determinism), and the test says why the exact comparison was skipped.

The re-run is a subprocess with the recorded run's environment (no ``XLA_FLAGS``): this suite's 8 fake
CPU devices change XLA:CPU's numerics, and so the sampled tokens, of the very same program."""
import os
import pathlib
import subprocess
import sys

import pytest

from experiments import reproduce
from prs.rl import provenance

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN = ROOT / "results" / "repro" / "arith-ps_ada-s0"


def _here_without_xla_flags() -> dict:
    """This machine's fingerprint as the subprocess (no XLA_FLAGS, one host device) will see it."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    code = "import json; from prs.rl.provenance import machine_fingerprint as m; print(json.dumps(m()))"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    import json

    return json.loads(r.stdout.strip().splitlines()[-1])


def _replay(mode: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "experiments.reproduce", str(RUN), "--mode", mode], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1200)


@pytest.fixture(scope="module")
def mismatch() -> list[str]:
    recorded = reproduce.read_records(RUN)
    assert sum(r["kind"] == "train" for r in recorded) == 4
    assert any(r.get("groups_rerolled") for r in recorded)  # the prefix path is exercised
    why = provenance.fingerprint_mismatch(reproduce.recorded_machine(RUN), _here_without_xla_flags())
    print("machine fingerprint " + ("matches the record's" if not why else "differs: " + "; ".join(why)))
    return why


@pytest.mark.slow
def test_the_committed_run_reproduces_exactly_on_a_matching_machine(mismatch):
    if mismatch:
        pytest.skip("exact replay needs the recording machine's numerics; here " + "; ".join(mismatch))
    r = _replay("exact")
    assert r.returncode == 0 and "identical records" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]


@pytest.mark.slow
def test_the_committed_run_re_runs_deterministically_on_another_machine(mismatch):
    if not mismatch:
        pytest.skip("the fingerprint matches: the exact replay (which implies determinism) is the test here")
    r = _replay("determinism")
    assert r.returncode == 0 and "deterministic: two fresh re-runs" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]


def test_diff_reports_a_changed_record():
    recorded = reproduce.read_records(RUN)
    changed = [dict(r) for r in recorded]
    changed[1]["pass_rate"] = -1.0
    changed[1]["time_sample"] = 123.0  # wall-clock differences are ignored
    out = reproduce.diff(recorded, changed)
    assert len(out) == 1 and "pass_rate" in out[0] and "time_sample" not in out[0]
    assert reproduce.diff(recorded, changed[:-1])[0].endswith("re-run lines")
    added = [{**r, "new/metric": 1.0} for r in recorded]          # a metric added since: new, not different
    assert reproduce.diff(recorded, added) == [] and reproduce.new_fields(recorded, added) == ["new/metric"]
    dropped = [{k: v for k, v in r.items() if k != "pass_rate"} for r in recorded]
    assert any("pass_rate" in line for line in reproduce.diff(recorded, dropped))  # a recorded field lost


def _fp(**kw) -> dict:
    base = {"cpu_model": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 17", "arch": "x86_64", "isa": ["avx", "avx2", "avx512f", "fma"], "cores": 2,
            "platform": "cpu", "device_count": 1, "jax": "0.10.2", "jaxlib": "0.10.2", "xla_flags": None}
    return {**base, **kw}


def test_fingerprint_mismatch_names_each_field_that_decides_numerics():
    assert provenance.fingerprint_mismatch(_fp(), _fp(cpu_model="AMD EPYC 9004")) == []  # the name alone: same code
    assert provenance.fingerprint_mismatch(_fp(), _fp(cpu_id="AuthenticAMD family 25 model 1"))[0].startswith("cpu_id")
    why = provenance.fingerprint_mismatch(_fp(), _fp(isa=["avx", "avx2", "fma"], device_count=8))
    assert len(why) == 2 and why[0].startswith("isa:") and why[1].startswith("device_count:")
    assert provenance.fingerprint_mismatch(None, _fp())[0].startswith("the record has no machine fingerprint")
    assert provenance.fingerprint_mismatch(_fp(), _fp(xla_flags="--xla_cpu_max_isa=AVX2"))[0].startswith("xla_flags")


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
                 "model name\t: Some CPU\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f pni\n"
                 "processor\t: 1\nmodel name\t: Other\nflags\t\t: fpu\n")
    assert provenance._cpu_info(str(f)) == ("Some CPU", "GenuineIntel family 6 model 143",
                                            ["avx", "avx2", "avx512f", "fma", "sse4_2"])
    assert provenance._cpu_info(str(tmp_path / "missing")) == (None, None, [])
