"""Which compiled collectives the student wrote and which XLA added (autograder/course/added.py)
is decided by what the written program holds, never by an op_name the student can choose.

The attacks: the reference ring with its ppermute called through a primitive named "shift"
(honest in what it does; its compiled collective-permutes are named "shift") was failed as
"XLA adds 3 collectives"; a primitive named "ppermute" whose lowering asks GSPMD for a blocking
all-gather passed, its all-gather named "ppermute". Both are now judged by what they do. The
rest pins the rule on hand-written modules: merged and split collectives are the student's, a
collective the written program does not hold, or holds only where it never ran or outside a
manual region, is XLA's.
"""
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from autograder.core.program import Op
from autograder.course.added import added_collectives

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "attacks"


def _structure(fixture: str):
    """(structure results, compiled text) of ``fixture``'s matmul_allgather at mesh 2x4, read
    and judged as the grader reads the program (in-process: one small case, one mesh)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from autograder.core.meshes import make_mesh
    from autograder.course import registry
    from autograder.course.reading import export_for_reading, read_paths

    spec = importlib.util.spec_from_file_location(f"prov_{fixture}", FIXTURES / f"{fixture}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mesh = make_mesh(2, 4)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    placed = [jax.device_put(a, NamedSharding(mesh, P("X", "Y"))),
              jax.device_put(w, NamedSharding(mesh, P(None, "Y")))]

    def fn(x, y):
        return mod.matmul_allgather(x, y, mesh)

    compiled = jax.jit(fn).lower(*placed).compile()
    np.testing.assert_allclose(np.asarray(compiled(*placed)), a @ w, rtol=1e-4, atol=1e-4)
    exported, dynamic = export_for_reading(fn, placed)
    paths = read_paths(exported, mesh, compiled.as_text(), dynamic, (a, w))
    problem = registry.get("matmul_allgather")
    return [r for _, r in paths.judge(problem.rules, mesh, problem)], compiled.as_text()


def _op_names(text: str, opcode: str) -> list[str]:
    return re.findall(rf' {opcode}\(.*op_name="([^"]*)"', text)


def test_a_ring_sent_through_a_primitive_named_shift_is_the_students():
    results, text = _structure("named_shift_ring")
    names = _op_names(text, "collective-permute")
    assert names and all(n.endswith("/shift") for n in names), names  # the attack's premise
    assert all(r.passed for r in results), [r.message for r in results]


def test_a_gather_asked_for_by_a_primitive_named_ppermute_is_xlas():
    results, text = _structure("named_ppermute_gather")
    # the attack's premise: an all-gather the student never wrote (on JAX 0.10, GSPMD names it
    # after the student's primitive, ".../ppermute"; Shardy on newer JAX after the argument)
    names = _op_names(text, "all-gather")
    assert names, text
    failed = [r for r in results if not r.passed]
    assert failed and "XLA adds 1 collective(s)" in failed[0].message, failed
    assert "all-gather added by XLA" in failed[0].message
    assert "ppermute)" not in failed[0].message  # the student's name is not quoted


# ----------------------------------------------------------------- the rule on written modules
MODULE = '''HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (p: f32[4,2], q: f32[2,4]) -> (f32[4,8], f32[2,4], f32[2,4]) {
  %p = f32[4,2]{1,0} parameter(0)
  %q = f32[2,4]{1,0} parameter(1)
  %ag = f32[4,8]{1,0} all-gather(%p), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, \
dimensions={1}, use_global_device_ids=true, metadata={op_name="jit(f)/shard_map/all_gather"}
  %ar = (f32[2,4]{1,0}, f32[2,4]{1,0}) all-reduce(%q, %q), channel_id=2, \
replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, to_apply=%add, \
metadata={op_name="jit(f)/shard_map/psum"}
  %a0 = f32[2,4]{1,0} get-tuple-element(%ar), index=0
  %a1 = f32[2,4]{1,0} get-tuple-element(%ar), index=1
  ROOT %t = (f32[4,8]{1,0}, f32[2,4]{1,0}, f32[2,4]{1,0}) tuple(%ag, %a0, %a1)
}
'''


def _op(kind: str, nbytes: int, index: int, *, count=1, manual=True, axes=("Y",)) -> Op:
    return Op(prim=kind, kind=kind, axes=axes, in_shapes=((nbytes // 4,),), out_shapes=(),
              in_bytes=nbytes, out_bytes=nbytes, count=count, loop_depth=0,
              in_shard_map=manual, index=index)


#: the two tiles' reductions the combiner merged into one all-reduce (a psum and a pmax)
TILES = [_op("psum", 32, 1), _op("pmax", 32, 2)]


def _added(written, ran_elsewhere=frozenset()):
    return [(o.kind, o.axes, o.in_bytes)
            for o in added_collectives(MODULE, (2, 4), ("X", "Y"), written, ran_elsewhere)]


@pytest.mark.parametrize("written, ran_elsewhere, added", [
    # the program wrote the gather over Y, and the two tiles XLA merged into one all-reduce
    (TILES + [_op("all_gather", 32, 0)], frozenset(), []),
    # no gather written, whatever its op_name says: XLA's
    (TILES, frozenset(), [("all_gather", ("Y",), 32)]),
    # a gather written only in a branch that never ran (which XLA may fold away) stands for
    # nothing; one that ran on other devices does
    (TILES + [_op("all_gather", 32, 0, count=0)], frozenset(), [("all_gather", ("Y",), 32)]),
    (TILES + [_op("all_gather", 32, 0, count=0)], frozenset({0}), []),
    # written outside a manual region (GSPMD rewrites it), or over another axis: XLA's
    (TILES + [_op("all_gather", 32, 0, manual=False)], frozenset(), [("all_gather", ("Y",), 32)]),
    (TILES + [_op("all_gather", 32, 0, axes=("X",))], frozenset(), [("all_gather", ("Y",), 32)]),
    # one tile written: the merged all-reduce moves twice its bytes, so it is not all the
    # student's
    (TILES[:1] + [_op("all_gather", 32, 0)], frozenset(), [("psum", ("Y",), 64)]),
    # one written collective with room for both operands: an all-to-all XLA split in two
    ([_op("psum", 64, 1), _op("all_gather", 32, 0)], frozenset(), []),
])
def test_compiled_collectives_are_claimed_by_what_was_written(written, ran_elsewhere, added):
    assert _added(written, ran_elsewhere) == added


#: an exchange loop: an all-to-all over Y inside a while loop whose trip count the data decides
LOOP_MODULE = '''HloModule m

%cond (s: (s32[], f32[4,2])) -> pred[] {
  %s = (s32[], f32[4,2]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(0)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (s: (s32[], f32[4,2])) -> (s32[], f32[4,2]) {
  %s = (s32[], f32[4,2]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[4,2]{1,0} get-tuple-element(%s), index=1
  %a2a = f32[4,2]{1,0} all-to-all(%x), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, \
dimensions={0}
  %one = s32[] constant(1)
  %j = s32[] add(%i, %one)
  ROOT %t = (s32[], f32[4,2]{1,0}) tuple(%j, %a2a)
}

ENTRY %main (p: f32[4,2]) -> f32[4,2] {
  %p = f32[4,2]{1,0} parameter(0)
  %z = s32[] constant(0)
  %init = (s32[], f32[4,2]{1,0}) tuple(%z, %p)
  %w = (s32[], f32[4,2]{1,0}) while(%init), condition=%cond, body=%body
  ROOT %r = f32[4,2]{1,0} get-tuple-element(%w), index=1
}
'''


def _looped(kind: str, nbytes: int, index: int, *, count, depth) -> Op:
    return Op(prim=kind, kind=kind, axes=("Y",), in_shapes=((nbytes // 4,),), out_shapes=(),
              in_bytes=nbytes, out_bytes=nbytes, count=count, loop_depth=depth,
              in_shard_map=True, index=index)


@pytest.mark.parametrize("written, added", [
    # the exchange loop ran rounds: its all-to-all is the student's
    ([_looped("all_to_all", 32, 0, count=2, depth=1)], []),
    # it ran none on this input (nothing left to send after the first round, as the reference
    # MoE exchange on some routings): the compiled one in the loop ran no more, still the
    # student's (a reference answer once failed structure on such a secret case)
    ([_looped("all_to_all", 32, 0, count=0, depth=1)], []),
    # written in a branch never taken, outside any loop: stands for nothing
    ([_looped("all_to_all", 32, 0, count=0, depth=0)], [("all_to_all", ("Y",), 32)]),
])
def test_a_loop_that_ran_no_round_keeps_its_collectives_the_students(written, added):
    got = added_collectives(LOOP_MODULE, (2, 4), ("X", "Y"), written, frozenset())
    assert [(o.kind, o.axes, o.in_bytes) for o in got] == added


def test_an_exchange_split_per_peer_is_claimed_whole_before_pieces():
    """Three all-to-alls written in one exchange round (ids 32 B, tokens 288 B, results
    128 B) compile to three split per peer (8 operands each): each takes its own written
    one whole, never pieces of another's (a greedy split once left the results' all-to-all
    unclaimed: a reference answer failed structure on a secret case)."""
    peers = ", ".join(["f32[1,1,9]{2,1,0}"] * 8)
    small = ", ".join(["s32[1,1]{1,0}"] * 8)
    res = ", ".join(["f32[1,1,4]{2,1,0}"] * 8)
    groups = "replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}"
    text = f'''HloModule m

ENTRY %main (a: s32[1,1], b: f32[1,1,9], c: f32[1,1,4]) -> f32[1,1,4] {{
  %a = s32[1,1]{{1,0}} parameter(0)
  %b = f32[1,1,9]{{2,1,0}} parameter(1)
  %c = f32[1,1,4]{{2,1,0}} parameter(2)
  %x = ({small}) all-to-all({", ".join(["%a"] * 8)}), channel_id=1, {groups}
  %y = ({peers}) all-to-all({", ".join(["%b"] * 8)}), channel_id=2, {groups}
  %z = ({res}) all-to-all({", ".join(["%c"] * 8)}), channel_id=3, {groups}
  ROOT %r = f32[1,1,4]{{2,1,0}} get-tuple-element(%z), index=0
}}
'''
    written = [Op(prim="all_to_all", kind="all_to_all", axes=("X",), in_shapes=((n,),),
                  out_shapes=(), in_bytes=n, out_bytes=n, count=2, loop_depth=1,
                  in_shard_map=True, index=i) for i, n in enumerate((288, 32, 128))]
    assert added_collectives(text, (8, 1), ("X", "Y"), written, frozenset()) == []


# ------------------------------------------------------- a name is text in the compiled module
#: a named_scope's name as the compiled module prints it (escaped): a reader that took its first
#: quote for the end of the string read ``replica_groups`` of one device each (nothing moves)
#: after the real ones, the name's ``*/`` and ``stack_frame_id`` as the text's own
HIDE = '"}, replica_groups={{0},{1},{2},{3},{4},{5},{6},{7}}, source_target_pairs={}, z={"'
ESCAPED = HIDE.replace('"', '\\"')

NAMED = f'''HloModule m

ENTRY %main (p: f32[4,2]) -> f32[4,8] {{
  %p = f32[4,2]{{1,0}} parameter(0), metadata={{op_name="p /* stack_frame_id=9"}}
  ROOT %ag = f32[4,8]{{1,0}} all-gather(%p), channel_id=1, \
replica_groups={{{{0,1,2,3}},{{4,5,6,7}}}}, dimensions={{1}}, use_global_device_ids=true, \
metadata={{op_name="jit(f)/{ESCAPED}/all_gather */" source_file="a\\\\" source_line=7 \
stack_frame_id=2}}
}}
'''


def test_a_name_that_reads_as_attributes_stays_text():
    """A quote, a bracket, a comma, a ``/*`` or a ``key=`` inside a printed string is the
    string's: the all-gather keeps the groups XLA gave it, and its name and source are read
    whole (a quote escaped, a backslash ending a string)."""
    from autograder.tpumodel.hlo import device_groups, parse_module
    from autograder.tpumodel.hlo_sources import source_of
    from autograder.tpumodel.hlo_text import string_field

    comps, entry = parse_module(NAMED)
    p, ag = comps[entry].instrs
    assert ag.opcode == "all-gather" and ag.operands == ["p"]
    assert sorted(ag.attrs) == ["channel_id", "dimensions", "metadata", "replica_groups",
                                "use_global_device_ids"]
    assert device_groups(ag.attrs, 8, (2, 4)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert string_field(ag.attrs["metadata"], "op_name") == f"jit(f)/{ESCAPED}/all_gather */"
    assert string_field(p.attrs["metadata"], "op_name") == "p /* stack_frame_id=9"
    frames = {2: ("f.py", 3), 9: ("planted.py", 1)}
    assert source_of(ag.attrs["metadata"], frames) == ("f.py", 3)
    assert source_of(p.attrs["metadata"], frames) == ()
    assert source_of(ag.attrs["metadata"], {}) == ("a\\\\", 7)


def test_a_string_left_open_is_unreadable_not_split():
    from autograder.tpumodel.hlo import ModelError, parse_module

    with pytest.raises(ModelError, match="closing quote"):
        parse_module(NAMED.replace('source_file="a\\\\"', 'source_file="a\\"'))


@pytest.mark.parametrize("collective", ["all_gather", "ppermute"])
def test_a_named_scope_leaves_the_groups_the_model_reads(collective):
    """The compiled module's collectives, read by the TPU model and by the check of what XLA
    adds, move data among the devices XLA says, whatever the named_scope around them is called
    (psum_slices inside such a scope passed the speed check, its all-reduces priced as among
    one device: tests/fixtures/attacks/named_scope_slices.py)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from autograder.core.meshes import make_mesh
    from autograder.tpumodel.hlo import device_groups, parse_module, source_target_pairs

    mesh = make_mesh(2, 4)
    ring = [(k, (k + 1) % 4) for k in range(4)]

    def program(scope):
        def body(a):
            with jax.named_scope(scope):
                if collective == "ppermute":
                    return jax.lax.ppermute(a, "Y", ring)
                return jax.lax.all_gather(a, "Y", axis=1, tiled=True)

        out = P("X", "Y") if collective == "ppermute" else P("X", None)
        return jax.shard_map(body, mesh=mesh, in_specs=P("X", "Y"), out_specs=out,
                             check_vma=False)

    x = jax.device_put(np.ones((8, 16), np.float32), NamedSharding(mesh, P("X", "Y")))

    def read(scope):
        text = jax.jit(program(scope)).lower(x).compile().as_text()
        comps, _ = parse_module(text)
        got = [(i.opcode, device_groups(i.attrs, 8, (2, 4)), source_target_pairs(i.attrs))
               for c in comps.values() for i in c.instrs
               if i.opcode.startswith(("all-gather", "collective-permute"))]
        assert got, text
        return got, text

    honest, _ = read("exchange")
    hidden, text = read(HIDE)
    assert ESCAPED in text  # the attack's premise: the name is in the module, escaped
    assert hidden == honest
