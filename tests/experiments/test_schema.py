"""The Hydra schema is derived from the library's dataclasses: every field declared once."""
import dataclasses

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from experiments import config as C
from experiments import simulate as S
from experiments.schema import node, rest_of, to_kwargs
from prs import sim
from prs.core.prefix import PrefixConfig
from prs.rl.runner import RunConfig
from prs.rl.config import PARTS, RLConfig


def _defaults(cls):
    return {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory()) for f in dataclasses.fields(cls)}


NODES = [C.MethodCfg, C.AlgoCfg, C.RolloutCfg, C.OptimCfg, C.LossCfg, C.ScheduleCfg, C.EvalCfg, C.SftCfg, C.LoggingCfg,
         C.TrainCfg, S.LearnerCfg, S.ControllerCfg]


@pytest.mark.parametrize("lib", [RLConfig, *PARTS.values(), PrefixConfig, RunConfig, sim.SimConfig])
def test_node_defaults_are_the_library_defaults(lib):
    lib_defaults, seen = _defaults(lib), set()
    for n in NODES:
        got = to_kwargs(n(), lib)
        for k, v in got.items():
            assert v == lib_defaults[k], (n.__name__, k)
        seen |= set(got)
    # every field of RLConfig (its parts aside) / a part / RunConfig / SimConfig reaches the config; PrefixConfig's n
    # is algo.group_size
    expect = set(lib_defaults) - {"n"} - ({"init_checkpoint"} if lib is RunConfig else set()) \
        - ({"mode"} if lib is sim.SimConfig else set()) - (set(PARTS) if lib is RLConfig else set())
    assert expect <= seen, sorted(expect - seen)


def test_the_nodes_mirror_rlconfig_one_to_one():
    """``algo`` = RLConfig's own fields, and each part's node holds exactly that part's fields, same names."""
    own = [f.name for f in dataclasses.fields(RLConfig) if f.name not in PARTS]
    assert [f.name for f in dataclasses.fields(C.AlgoCfg)] == own == ["tasks_per_step", "group_size", "micro_batches",
                                                                       "logits_chunk"]
    for name, part in PARTS.items():
        node_cls = {f.name: f.type for f in dataclasses.fields(C.TrainCfg)}[name]
        fields = [f.name for f in dataclasses.fields(node_cls) if f.name != "every"]
        assert fields == [f.name for f in dataclasses.fields(part)], name
        assert set(to_kwargs(node_cls(), part)) == set(fields)
    assert {f.name for f in dataclasses.fields(RLConfig)} == set(own) | set(PARTS)
    # each field declared once: no field name in two parts (or in a part and RLConfig itself)
    names = own + [f.name for part in PARTS.values() for f in dataclasses.fields(part)]
    assert len(names) == len(set(names))


def test_a_new_library_field_appears_in_the_node():
    @dataclasses.dataclass(frozen=True)
    class Lib:
        a: int = 1
        b: float | None = None
        c: float | tuple = 0.5
        new_knob: str = "x"

    Node = node("Node", (Lib, rest_of(Lib, ["a"])), extra={"name": (str, "n")})
    assert [f.name for f in dataclasses.fields(Node)] == ["name", "b", "c", "new_knob"]
    assert to_kwargs(Node(), Lib) == {"b": None, "c": 0.5, "new_knob": "x"}
    OmegaConf.merge(OmegaConf.structured(Node), {"b": 2.0, "c": [0.1, 0.2]})  # Any for float | tuple
    with pytest.raises(ValidationError):
        OmegaConf.merge(OmegaConf.structured(Node), {"b": "not a float"})
    with pytest.raises(ValueError, match="has no field 'zzz'"):
        node("Bad", (Lib, ["zzz"]))


def test_train_schema_rejects_unknown_keys_and_wrong_types():
    with pytest.raises(Exception, match="metod"):
        C.validate(OmegaConf.create({"metod": {"name": "x"}}))
    with pytest.raises(ValidationError):
        C.validate(OmegaConf.create({"loss": {"clip_high": "wide"}}))
    cfg = C.validate(OmegaConf.create({"loss": {"clip_high": 0.3}, "method": {"rho_init": [0.3, 0.6]}}))
    assert cfg.loss.clip_high == 0.3 and list(cfg.method.rho_init) == [0.3, 0.6]
