"""`torchlean-conformance replay FILE` treats the file as data (issue 34): the plugin a file names
is imported only when the user passes the same --plugin; every field is checked, and the case's
declared size against a cap, before anything is allocated; each problem is a usage error (exit 2)
that names the field."""
import inspect
import json
import tracemalloc
import uuid

import numpy as np
import pytest

from conformance.cli import main
from conformance.generators import EDGES, Case, draw_case
from conformance.families import SPECS
from conformance.replay import (DEFAULT_MAX_ELEMENTS, PARAM_KINDS, POOL_PARAMS, decode_case,
                                encode_case, write_replay)
from engine.types import BackendOp as Op

PLUGIN = "fixtures.plugins.numpy_kernels:ENTRIES"
SPECS_BY_LABEL = {spec.op.label: spec.op for spec in SPECS}


def _ones(n: int) -> np.ndarray:
    return np.ones(n, np.float32)


def _add_file(tmp_path, plugin=None, capsule="reference.add"):
    path = tmp_path / "case.json"
    write_replay(path, capsule, Case(Op.add, "normal", (_ones(3), _ones(3)), {}), [], plugin,
                 "cpu")
    return path


def _edit(path, **case_fields):
    """The file with some of its case's fields replaced (what a hand-edited file holds)."""
    data = json.loads(path.read_text())
    data["case"].update(case_fields)
    path.write_text(json.dumps(data))
    return path


def _replay(capsys, *args):
    code = main(["replay", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- the plugin a file names ----------------------------------------------------------------------

@pytest.fixture
def marker_plugin(tmp_path, monkeypatch):
    """A plugin module that says when it was imported (its import runs its code)."""
    name = f"replay_marker_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_suffix('.imported').write_text('yes')\n"
        "from fixtures.plugins.numpy_kernels import ENTRIES\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:ENTRIES", tmp_path / f"{name}.imported"


def test_a_files_plugin_is_not_imported_without_the_same_plugin_option(tmp_path, capsys,
                                                                       marker_plugin):
    plugin, imported = marker_plugin
    path = _add_file(tmp_path, plugin, capsule="user.numpy_add")
    code, out, err = _replay(capsys, path)
    assert code == 2 and not imported.exists(), err
    assert f"names plugin `{plugin}` for capsule `user.numpy_add`" in err
    assert f"run: torchlean-conformance replay --plugin {plugin} {path}" in err
    assert out == "" and "Traceback" not in err


def test_with_the_same_plugin_option_the_file_replays(tmp_path, capsys, marker_plugin):
    plugin, imported = marker_plugin
    path = _add_file(tmp_path, plugin, capsule="user.numpy_add")
    code, out, err = _replay(capsys, "--plugin", plugin, path)
    assert code == 0 and imported.exists(), err
    assert "replaying user.numpy_add" in out and "passes now" in out


@pytest.mark.parametrize("recorded", ["sys:exit", "os:abort", "os:fork", "pdb:set_trace"])
def test_a_file_naming_a_callable_of_the_standard_library_is_refused(recorded, tmp_path, capsys):
    code, out, err = _replay(capsys, _add_file(tmp_path, recorded))
    assert code == 2 and f"names plugin `{recorded}`" in err
    assert f"--plugin {recorded}" in err and out == ""


def test_another_plugin_than_the_files_is_refused(tmp_path, capsys, marker_plugin):
    plugin, imported = marker_plugin
    path = _add_file(tmp_path, "sys:exit")
    code, _, err = _replay(capsys, "--plugin", plugin, path)
    assert code == 2 and not imported.exists()
    assert "names plugin `sys:exit`" in err and f"--plugin {plugin} was given" in err


def test_a_plugin_option_for_a_built_in_capsules_file_is_refused(tmp_path, capsys):
    code, _, err = _replay(capsys, "--plugin", PLUGIN, _add_file(tmp_path))
    assert code == 2
    assert "names no plugin (capsule `reference.add` is built in)" in err and "drop --plugin" in err


def test_a_plugin_files_replay_command_names_its_plugin(tmp_path):
    command = write_replay(tmp_path / "r.json", "user.numpy_add",
                           Case(Op.add, "normal", (_ones(1), _ones(1)), {}), [], PLUGIN, "cpu")
    assert command == f"torchlean-conformance replay --plugin {PLUGIN} {tmp_path / 'r.json'}"


# --- sizes, checked before allocating -------------------------------------------------------------

def _rand_file(tmp_path, shape):
    case = draw_case(Op.rand_uniform, 0, "normal", 0)
    case.params["shape"] = tuple(shape)
    path = tmp_path / "rand.json"
    write_replay(path, "reference.rand_uniform", case, [], None, "cpu")
    return path


def test_an_oversized_declared_shape_is_refused_before_allocating(tmp_path, capsys):
    path = _rand_file(tmp_path, [10 ** 8])
    tracemalloc.start()
    try:
        code, _, err = _replay(capsys, path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 2 and "Traceback" not in err
    assert "the case declares 100000000 elements, more than the cap of 67108864" in err
    assert "case.params.shape [100000000]" in err and "--max-elements 100000000" in err
    assert peak < 64 * 2 ** 20, f"{peak} bytes traced: the case was allocated"


def test_max_elements_sets_the_cap(tmp_path, capsys):
    path = _rand_file(tmp_path, [1000])
    code, _, err = _replay(capsys, "--max-elements", 999, path)
    assert code == 2 and "more than the cap of 999 per case" in err
    code, out, err = _replay(capsys, "--max-elements", 1000, path)
    assert code == 0 and "passes now" in out, err


def test_the_output_an_op_builds_counts_against_the_cap(tmp_path, capsys):
    """A 64 x 1 by 1 x 64 product declares 128 input elements and builds 4096."""
    rng = np.random.default_rng(0)
    case = Case(Op.matmul, "normal", (rng.standard_normal((64, 1)).astype(np.float32),
                                      rng.standard_normal((1, 64)).astype(np.float32)),
                {"trans_a": False, "trans_b": False})
    path = tmp_path / "mm.json"
    write_replay(path, "reference.matmul", case, [], None, "cpu")
    code, _, err = _replay(capsys, "--max-elements", 1000, path)
    assert code == 2 and "the case declares 4224 elements" in err
    assert "largest: the output of matmul, 4096 elements" in err


def test_the_default_cap_is_2_to_the_26():
    assert DEFAULT_MAX_ELEMENTS == 2 ** 26


# --- malformed fields: usage errors naming the field ----------------------------------------------

@pytest.mark.parametrize("fields, named", [
    ({"params": [1, 2]}, "`case.params` holds list [1, 2], expected an object of named "
                         "parameters"),
    ({"params": {"axis": 1}}, "`case.params.axis`: op `add` takes no parameter `axis`"),
    ({"seed": -1}, "`case.seed` holds int -1, expected a whole number from 0 to"),
    ({"inputs": "x"}, "`case.inputs` holds str 'x', expected a list of float32 arrays"),
    ({"cotangent": {"dtype": "float64", "shape": [3], "data": [1, 2, 3]}},
     "`case.cotangent.dtype` holds str 'float64', expected 'float32'"),
    ({"op": "fma"}, "`case.op` holds str 'fma', expected an op name"),
])
def test_a_malformed_case_is_a_usage_error_naming_the_field(fields, named, tmp_path, capsys):
    code, out, err = _replay(capsys, _edit(_add_file(tmp_path), **fields))
    assert code == 2 and named in err, err
    assert "Traceback" not in err and "harness" not in out + err


def test_float32_bits_over_32_bits_are_a_usage_error(tmp_path, capsys):
    path = _add_file(tmp_path)
    case = json.loads(path.read_text())["case"]
    case["inputs"][1]["data"][2] = "0x1ffffffff"
    code, _, err = _replay(capsys, _edit(path, inputs=case["inputs"]))
    assert code == 2 and "`case.inputs[1].data[2]` holds str '0x1ffffffff'" in err
    assert "Traceback" not in err


def test_data_that_does_not_fill_its_shape_is_a_usage_error(tmp_path, capsys):
    path = _add_file(tmp_path)
    case = json.loads(path.read_text())["case"]
    case["inputs"][0]["shape"] = [4]
    code, _, err = _replay(capsys, _edit(path, inputs=case["inputs"]))
    assert code == 2 and "`case.inputs[0].data` holds 3 elements but its shape [4] needs 4" in err


@pytest.mark.parametrize("params, named", [
    ({"axis": "x"}, "`case.params.axis` holds str 'x', expected a whole number"),
    ({"axis": True}, "`case.params.axis` holds bool True, expected a whole number"),
    ({"axis": 2 ** 70}, "`case.params.axis` holds int 1180591620717411303424, expected"),
    ({"axis": None}, "`case.params.axis` holds NoneType None, expected a whole number"),
])
def test_a_parameter_of_the_wrong_kind_is_a_usage_error_not_a_harness_defect(params, named,
                                                                             tmp_path, capsys):
    case = Case(Op.softmax, "normal", (_ones(4),), {"axis": 0})
    path = tmp_path / "softmax.json"
    write_replay(path, "reference.softmax", case, [], None, "cpu")
    code, out, err = _replay(capsys, _edit(path, params=params))
    assert code == 2 and named in err, out + err
    assert "harness" not in out + err


@pytest.mark.parametrize("op, params, named", [
    ("rand_uniform", {"shape": [-1, 2]}, "`case.params.shape[0]` holds int -1, expected a whole "
                                         "number from 0"),
    ("layer_norm", {"eps": 1e300}, "`case.params.eps` holds float 1e+300, expected a positive "
                                   "number that float32 holds"),
    ("bernoulli_mask", {"p": 1.5}, "`case.params.p` holds float 1.5, expected a probability"),
    ("max_pool", {"stride": [0, 0]}, "`case.params.stride[0]` holds int 0, expected a whole "
                                     "number from 1"),
    ("max_pool", {"kernel_size": [10 ** 6, 10 ** 6]},
     "largest: the output and window tables of max_pool, 2000000000000 elements"),
    ("conv", {"stride": []}, "`case.params.stride`: [] has 0 entries, but the case has 2 spatial "
                             "axes"),
    ("conv", {"groups": 0}, "`case.params.groups` holds int 0, expected a whole number from 1"),
    ("conv", {"groups": 10 ** 6}, "`case.params.groups`: 1000000 with x of"),
])
def test_parameters_out_of_their_ops_range_are_usage_errors(op, params, named, tmp_path, capsys):
    """Each of these reached the reference and was reported as a harness defect (exit 3), or
    allocated terabytes."""
    case = draw_case(SPECS_BY_LABEL[op], 0, "normal", 0)
    path = tmp_path / f"{op}.json"
    write_replay(path, f"reference.{op}", case, [], None, "cpu")
    fields = json.loads(path.read_text())["case"]["params"]
    code, out, err = _replay(capsys, _edit(path, params={**fields, **params}))
    assert code == 2 and named in err, out + err
    assert "harness" not in out + err


def test_a_missing_required_parameter_is_named(tmp_path, capsys):
    case = Case(Op.clamp, "normal", (_ones(4),), {"lo": 0.0, "hi": 1.0})
    path = tmp_path / "clamp.json"
    write_replay(path, "reference.clamp", case, [], None, "cpu")
    code, _, err = _replay(capsys, _edit(path, params={"lo": 0.0}))
    assert code == 2 and "`case.params` lacks `hi`, which op `clamp` needs" in err


def test_a_case_of_another_op_than_the_capsules_is_a_usage_error(tmp_path, capsys):
    """It used to replay `mul` inputs through `add`'s capsule and say `passes now`."""
    code, out, err = _replay(capsys, _edit(_add_file(tmp_path), op="mul"))
    assert code == 2 and "passes now" not in out
    assert "its case is of op `mul`, but capsule `reference.add` computes `add`" in err


@pytest.mark.parametrize("field, value, named", [
    ("plugin", 7, "`plugin` holds int 7, expected a MODULE:ATTR string or null"),
    ("device", ["cpu"], "`device` holds list ['cpu'], expected a device name"),
    ("reasons", [1], "`reasons` holds list [1], expected a list of failure reasons"),
])
def test_malformed_top_level_fields_are_usage_errors(field, value, named, tmp_path, capsys):
    path = _add_file(tmp_path)
    data = json.loads(path.read_text())
    data[field] = value
    path.write_text(json.dumps(data))
    code, _, err = _replay(capsys, path)
    assert code == 2 and named in err and "Traceback" not in err


# --- well-formed files still replay --------------------------------------------------------------

def test_a_fused_entrys_case_replays(tmp_path, capsys):
    """RuntimeEntry ops (bias_gelu, add_layer_norm, ...) decode too: their labels are not
    BackendOp's, which the old decoder alone knew."""
    path = tmp_path / "bias_gelu.json"
    write_replay(path, "reference.bias_gelu", draw_case(SPECS_BY_LABEL["bias_gelu"], 0, EDGES, 0),
                 [], None, "cpu")
    code, out, err = _replay(capsys, path)
    assert code == 0 and "replaying reference.bias_gelu" in out, out + err


@pytest.mark.parametrize("cls", [EDGES, "normal", "shapes"])
def test_every_ops_generated_case_passes_the_checks_unchanged(cls):
    for spec in SPECS:
        case = draw_case(spec.op, 3, cls, 0)
        again = decode_case(json.loads(json.dumps(encode_case(case))))
        assert again.op is case.op and again.cls == cls, spec.op.label
        assert [a.view(np.uint32).tolist() for a in again.inputs] == \
            [a.view(np.uint32).tolist() for a in case.inputs], spec.op.label
        assert set(again.params) == set(case.params), spec.op.label


def test_every_parameter_a_reference_takes_has_a_kind():
    from conformance.references import OPS, get
    for op in OPS:
        params = list(inspect.signature(get(op).forward).parameters.values())[1:]
        for p in params:
            names = POOL_PARAMS if p.kind is inspect.Parameter.VAR_KEYWORD else (p.name,)
            assert all(n in PARAM_KINDS for n in names), (op, p.name)
