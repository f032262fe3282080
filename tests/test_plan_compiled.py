"""The planner against the compiler at a preset's real widths (issue #29): the 4B 8xH200 preset's
sampler re-roll call and update compiled on 8 fake CPU devices with abstract inputs at 2 and 4
layers, extended to 36 (``prs.plan_compiled``), against ``prs.plan``'s lines; all four presets are
in ``benchmarks/plan_compiled.py`` (docs/scaling.md)."""
import pytest

from prs import plan as PL
from experiments.plan import preset_setup
from prs import plan_compiled as PC

PRESET = "grpo_ps_qwen3_4b_h200x8"


@pytest.fixture(scope="module")
def setup(eight_devices):
    from prs.parallel.sharding import make_mesh

    s = preset_setup(PRESET)
    s["mesh"] = make_mesh(eight_devices, **s["sizes"])
    s["plan"] = lambda rerolls: PL.plan_run(s["model_cfg"], s["rl"], prompt_len=s["prompt_len"],  # noqa: E731
                                            max_new_tokens=s["budget"], device_gib=s["device_gib"],
                                            prefix_rerolls=rerolls, mem_fraction=s["mem_fraction"], **s["sizes"])
    return s


@pytest.mark.slow
def test_planner_is_within_15_percent_of_the_compiled_reroll_call_and_update_on_the_safe_side(setup):
    s = setup
    cfg, rl, T, P = s["model_cfg"], s["rl"], s["budget"], s["prompt_len"]
    rows = rl.tasks_per_step * rl.group_size
    reroll = PC.extrapolated(lambda c: PC.sampler_memory(c, rows=rl.rollout.row_chunk or rows, prompt_len=P, max_new_tokens=T,
                                                         mesh=s["mesh"], reroll=True), cfg)["full"]
    update = PC.extrapolated(lambda c: PC.update_memory(c, rl, rows=rows, width=P + 2 * T, mesh=s["mesh"]), cfg)["full"]
    p = s["plan"](True)
    for name, planned, compiled in [("re-roll call", p.sampling_total, reroll.total),
                                    ("update", p.update_total, update.total)]:
        assert 1.0 <= planned / compiled <= 1.15, (name, planned / PL.GIB, compiled / PL.GIB)
    # and the preset fits by the compiler's count with >= 10% headroom of the allocator's share
    peak = max(p.resident + reroll.total, update.total)
    assert peak <= 0.9 * p.usable, (peak / PL.GIB, p.usable / PL.GIB)


def test_extrapolation_is_linear_in_the_layer_count():
    m = [PC.Memory(10.0 + 2 * L, 1.0, 0.5, 3.0 * L) for L in (2, 4)]
    calls = iter(m)

    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class C:
        n_layers: int = 36

    e = PC.extrapolated(lambda c: next(calls), C())
    assert e["full"].arguments == 10.0 + 2 * 36 and e["full"].temps == 3.0 * 36
    assert e["full"].total == e["full"].arguments + e["full"].temps + 1.0 - 0.5
