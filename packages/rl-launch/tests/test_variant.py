import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_launch import (
    VARIANT_FILE,
    VariantLevel,
    load_variant,
    make_variants,
    save_variant,
    update_config,
)

DEFAULT = {
    "env": "CartPole-v1",
    "algo": {"lr": 1e-3, "discount": 0.99, "clip": {"grad": 1.0, "value": None}},
    "sampler": {"batch_B": 8, "batch_T": 5},
    "model_kwargs": None,
}


def test_three_levels_cross_in_order_with_their_dirs():
    envs = VariantLevel(
        keys=["env"], values=[["CartPole-v1"], ["Acrobot-v1"]], dir_names=["cp", "ac"]
    )
    algo = VariantLevel(
        keys=[("algo", "lr"), ("sampler", "batch_B")],
        values=[[1e-3, 8], [3e-4, 16], [1e-4, 32]],
        dir_names=["lr1e-3_B8", "lr3e-4_B16", "lr1e-4_B32"],
    )
    clip = VariantLevel(keys=[("algo", "clip", "grad")], values=[[0.5]], dir_names=["g0.5"])
    variants, log_dirs = make_variants(envs, algo, clip)
    assert len(variants) == len(log_dirs) == 6
    assert log_dirs[:4] == [
        "cp/lr1e-3_B8/g0.5",
        "cp/lr3e-4_B16/g0.5",
        "cp/lr1e-4_B32/g0.5",
        "ac/lr1e-3_B8/g0.5",
    ]
    assert variants[4] == {
        "env": "Acrobot-v1",
        "algo": {"lr": 3e-4, "clip": {"grad": 0.5}},
        "sampler": {"batch_B": 16},
    }
    assert len({json.dumps(v, sort_keys=True) for v in variants}) == 6
    config = update_config(DEFAULT, variants[4])
    assert config["algo"] == {"lr": 3e-4, "discount": 0.99, "clip": {"grad": 0.5, "value": None}}
    assert config["sampler"] == {"batch_B": 16, "batch_T": 5}


def test_make_variants_refuses_a_wrong_product():
    ok = VariantLevel(["env"], [["a"]], ["a"])
    cases = [
        ((VariantLevel(["env"], [["a"]], ["a"]), ok), "clashes"),
        (
            (VariantLevel([("algo", "lr")], [[1]], ["x"]), VariantLevel(["algo"], [[{}]], ["y"])),
            "clashes",
        ),
        ((VariantLevel(["env", "seed"], [["a"]], ["a"]),), r"values\[0\] must be a list of 2"),
        ((VariantLevel(["env"], [["a"], ["b"]], ["a"]),), "one name per row"),
        ((VariantLevel(["env"], [["a"], ["b"]], ["a", "a"]),), "dir_names repeat"),
        ((VariantLevel(["env"], [["a"]], ["/abs"]),), "relative path"),
        ((VariantLevel(["env"], [["a"]], ["../up"]),), "relative path"),
        ((VariantLevel(["env"], [], []),), "no values"),
        ((VariantLevel([""], [["a"]], ["a"]),), "non-empty str"),
        ((), "at least one"),
    ]
    for levels, message in cases:
        with pytest.raises(ValueError, match=message):
            make_variants(*levels)
    with pytest.raises(TypeError, match="must be a VariantLevel"):
        make_variants((["env"], [["a"]], ["a"]))


def test_update_config_refuses_unknown_keys_by_path_and_changes_nothing():
    before = json.dumps(DEFAULT, sort_keys=True)
    with pytest.raises(KeyError, match=r"'algo\.clip\.grads' is not in the default config"):
        update_config(DEFAULT, {"algo": {"clip": {"grads": 2.0}}})
    with pytest.raises(KeyError, match="'learning_rate'"):
        update_config(DEFAULT, {"learning_rate": 2.0})
    variant = {"algo": {"clip": {"value": 10.0}}, "model_kwargs": {"hidden": [64]}}
    config = update_config(DEFAULT, variant)
    assert config["algo"]["clip"] == {"grad": 1.0, "value": 10.0}
    assert config["model_kwargs"] == {"hidden": [64]}
    config["model_kwargs"]["hidden"].append(1)  # the result shares nothing with the inputs
    assert variant["model_kwargs"] == {"hidden": [64]}
    assert json.dumps(DEFAULT, sort_keys=True) == before
    with pytest.raises(TypeError, match="variant must be a mapping"):
        update_config(DEFAULT, [("env", "x")])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.text(min_size=1), json_values, max_size=5))
def test_save_and_load_variant_round_trip(tmp_path_factory, variant):
    log_dir = tmp_path_factory.mktemp("variant") / "a" / "b"
    path = save_variant(variant, log_dir)
    assert path == log_dir / VARIANT_FILE
    assert load_variant(log_dir) == variant
    assert [p.name for p in log_dir.iterdir()] == [VARIANT_FILE]  # (no temporary file left)


def test_save_and_load_variant_errors(tmp_path):
    with pytest.raises(TypeError, match="JSON"):
        save_variant({"f": object()}, tmp_path)
    assert not (tmp_path / VARIANT_FILE).exists()
    with pytest.raises(FileNotFoundError, match=VARIANT_FILE):
        load_variant(tmp_path)
