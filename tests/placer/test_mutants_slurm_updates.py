"""What the placer tells Slurm (pal_slurm/placer/slurm_updates.py), on the cases the rest of the
suite leaves open (each found by `make mutation`): every refusal of `check_update` with the
words an admin reads in the job's comment, the rescue's per-slot request (`fallback_update`),
when a placed job counts as stranded, and what a placed job's tag records."""

from __future__ import annotations

from dataclasses import replace

from pal_slurm.placer import cluster_view, shapes, slurm_updates
from pal_slurm.placer.cluster_view import Slot
from pal_slurm.placer.shapes import Shape
from pal_slurm.placer.slurm_updates import Update, check_update, fallback_update, stranded
from pal_slurm.placer.tag import PLACED, Tag
from pal_slurm.slurm.tres import parsed_tres
from tests.support.steering import CLASSES, FOUR, SF, factors, job, node


def _shape(tres: str, *, field: str = "tres_per_node", nodes: int = 1, **kw: object) -> Shape:
    return Shape(field, parsed_tres(tres), **{"gpus": 2 * nodes, "per_node": 2, "nodes": nodes, **kw})  # type: ignore[arg-type]


def _update(request: str, node_list: str, slots: list[tuple[str, str]]) -> Update:
    return Update(job_id="1", clear_field="TresPerNode", tres_per_node=request, node_list=node_list,
                  slots=tuple(Slot(n, int(t[-1]), t) for n, t in slots), original=("tres_per_node", "gres:gpu:2"))


TWO = "gres:gpu:v100_g0:1,gres:gpu:v100_g1:1"


# --------------------------------------------------------------------------- check_update: every refusal


def test_an_update_that_names_no_per_slot_type_is_refused() -> None:
    shape = _shape("gres:gpu:2", user_nodes=(1, 1), user_per_node=2)
    assert check_update(shape, _update("gres:gpu:2", "n1", [("n1", "v100_g0"), ("n1", "v100_g1")])) == \
        "the request would not name per-slot types"


def test_a_two_node_job_refuses_one_node_and_a_node_named_twice() -> None:
    """The node count must equal the shape's: one node fewer, or the same node twice, is refused."""
    shape = _shape("gres:gpu:2", nodes=2, user_nodes=(2, 2), user_per_node=2)
    both = [("n1", "v100_g0"), ("n1", "v100_g1"), ("n2", "v100_g0"), ("n2", "v100_g1")]
    assert check_update(shape, _update(TWO, "n1,n2", both)) is None
    assert check_update(shape, _update(TWO, "n1", both[:2])) == "1 node(s) in NodeList, the request allows 2..2"
    assert check_update(shape, _update(TWO, "n1,n1", both[:2] * 2)) == \
        "2 node(s) in NodeList, the request allows 2..2"


def test_a_gpus_per_job_request_is_steered_on_one_node_only_though_slurm_may_split_it() -> None:
    """`--gpus=2` may span 1..2 nodes as submitted; the placer sets it on exactly one, so an
    update over two nodes (one GPU each, two in all) is refused."""
    j = job("1", tpn="", tpj="gres:gpu:2")
    shape = shapes.request_shape(j, 4)
    assert not isinstance(shape, str) and shape.user_nodes == (1, 2) and shape.nodes == 1
    split = _update("gres:gpu:v100_g0:1", "n1,n2", [("n1", "v100_g0"), ("n2", "v100_g0")])
    assert check_update(shape, split) == "2 node(s) in NodeList, the request allows 1..2"


def test_the_slot_count_per_node_must_be_the_users() -> None:
    shape = _shape("gres:gpu:2", user_nodes=(1, 1), user_per_node=2)
    three = "gres:gpu:v100_g0:1,gres:gpu:v100_g1:1,gres:gpu:v100_g2:1"
    assert check_update(shape, _update(three, "n1", [("n1", "v100_g0"), ("n1", "v100_g1"), ("n1", "v100_g2")])) \
        == "3 GPU(s) per node, the request asks for 2"


def test_a_gpus_per_job_request_keeps_its_total() -> None:
    j = job("1", tpn="", tpj="gres:gpu:2")
    shape = shapes.request_shape(j, 4)
    assert not isinstance(shape, str) and shape.user_gpus == 2
    three = "gres:gpu:v100_g0:1,gres:gpu:v100_g1:1,gres:gpu:v100_g2:1"
    assert check_update(shape, _update(three, "n1", [("n1", "v100_g0"), ("n1", "v100_g1"), ("n1", "v100_g2")])) \
        == "3 GPU(s) in all, the request asks for 2"


def test_the_slots_chosen_must_be_as_many_as_the_gpus_set() -> None:
    shape = _shape("gres:gpu:2", user_nodes=(1, 1), user_per_node=2)
    assert check_update(shape, _update(TWO, "n1", [("n1", "v100_g0")])) == "1 slot(s) chosen for 2 GPU(s)"


def test_every_node_must_get_exactly_the_slot_types_of_the_request() -> None:
    """One per-node request applies to every node: a node whose chosen slots differ, or that
    has none of them, would get GPUs nobody chose."""
    shape = _shape("gres:gpu:2", nodes=2, user_nodes=(2, 2), user_per_node=2)
    other = [("n1", "v100_g0"), ("n1", "v100_g1"), ("n2", "v100_g0"), ("n2", "v100_g2")]
    assert check_update(shape, _update(TWO, "n1,n2", other)) == \
        "the slots on n2 (v100_g0,v100_g2) are not the requested v100_g0,v100_g1"
    none = [("n1", "v100_g0"), ("n1", "v100_g1"), ("n3", "v100_g0"), ("n3", "v100_g1")]
    assert check_update(shape, _update(TWO, "n1,n2", none)) == \
        "the slots on n2 (none) are not the requested v100_g0,v100_g1"


# --------------------------------------------------------------------------- what an update and a tag carry


def test_an_update_keeps_the_jobs_other_gres_and_names_the_job_and_the_users_request() -> None:
    j = job("7", tpn="gres:gpu:2,gres:mps:50", nodes=2)
    view = cluster_view.build_view(FOUR, [j], factors(SF), CLASSES)
    shape = shapes.request_shape(j, 4)
    assert not isinstance(shape, str)
    u = slurm_updates.update_for(j, shape, [0, 1, 4, 5], view)
    assert u.job_id == "7" and u.original == ("tres_per_node", "gres:gpu:2,gres:mps:50")
    assert u.tres_per_node == "gres:gpu:v100_g0:1,gres:gpu:v100_g1:1,gres:mps:50" and u.node_list == "n1,n2"


def test_a_placed_jobs_tag_records_its_gpus_by_node_factors_policy_and_version() -> None:
    u = _update(TWO, "n1,n2", [("n1", "v100_g0"), ("n1", "v100_g1"), ("n2", "v100_g0"), ("n2", "v100_g1")])
    tag = slurm_updates.summary(u, "B", "pal-guard", 7, [0.9, 1.1, 1.0, 1.25], 1796000000.7)
    assert tag == Tag(head=PLACED, job_class="B", intent=TWO, nodes="n1,n2", gpus="n1:0,1;n2:0,1",
                      sf="0.900,1.100,1.000,1.250", policy="pal-guard", version=7, at=1796000000)
    assert Tag.parse(tag.render()) == tag


def test_the_request_a_rescue_plans_from_is_the_users_whole_one() -> None:
    """A `--gpus=2` job (tres_per_job) placed as per-slot TresPerNode on n1: planned from its
    user's request again, that is TresPerJob back, no TresPerNode and no node list."""
    tag = Tag(head=PLACED, job_class="A", was=(("tres_per_job", "gres:gpu:2"),), intent=TWO, nodes="n1").render()
    placed = job("1", tpn=TWO, tpj="", required_nodes="n1", admin_comment=tag)
    user = slurm_updates.as_submitted(placed)
    assert (user.tres_per_node, user.tres_per_job, user.required_nodes) == ("", "gres:gpu:2", "")
    untagged = job("2", admin_comment="site note")
    assert slurm_updates.as_submitted(untagged) is untagged


# --------------------------------------------------------------------------- stranded


def _placed(**kw: object):  # type: ignore[no-untyped-def]
    tag = Tag(head=PLACED, job_class="A", was=(("tres_per_node", "gres:gpu:2"),), intent=TWO, nodes="n1").render()
    return job("1", tpn=TWO, required_nodes="n1", admin_comment=tag, state_reason="Resources", **kw)


def test_what_strands_a_placed_job_is_said_in_words() -> None:
    nodes = {n.name: n for n in FOUR}
    assert stranded(_placed(), nodes) is None
    assert stranded(replace(_placed(), state_reason="BadConstraints"), nodes) == "Slurm says BadConstraints"
    assert stranded(_placed(priority=0), nodes) == "priority 0"
    drained = {**nodes, "n1": node("n1", flags=frozenset({"DRAIN"}))}
    assert stranded(_placed(), drained) == "its node n1 is drain"
    gone = {**nodes, "n1": node("n1", state="DOWN", flags=frozenset({"DRAIN"}))}
    assert stranded(_placed(), gone) == "its node n1 is down,drain"
    three = "gres:gpu:v100_g5:1,gres:gpu:v100_g6:1"
    assert stranded(replace(_placed(), tres_per_node=three), nodes) == "its node n1 has no GPU slot v100_g5,v100_g6"


def test_a_one_node_job_pinned_to_two_nodes_is_stranded() -> None:
    """A `--gpus=2` job (one node as Slurm counts it) that an earlier placer pinned to two."""
    two = replace(_placed(), required_nodes="n1,n2", tres_per_node="gres:gpu:v100_g0:1", node_count=1, max_nodes=0)
    assert stranded(two, {n.name: n for n in FOUR}) == "pinned to 2 nodes, the job may span 1"


def test_only_a_pending_job_pal_placed_can_be_stranded() -> None:
    nodes = {n.name: n for n in FOUR}
    running = replace(_placed(priority=0), state="RUNNING", state_reason="None")
    assert stranded(running, nodes) is None
    not_ours = job("2", admin_comment="", state_reason="BadConstraints")
    assert stranded(not_ours, nodes) is None


# --------------------------------------------------------------------------- fallback_update


def _user_job(tpn: str = "gres:gpu:2", nodes: int = 2):  # type: ignore[no-untyped-def]
    """A placed job whose own request cannot be put back: the rescue plans from its user's."""
    tag = Tag(head=PLACED, job_class="A", was=(("tres_per_node", tpn),), intent=TWO, nodes="n1,n2").render()
    return job("1", tpn=TWO, required_nodes="n1,n2", admin_comment=tag, nodes=nodes)


def test_the_rescue_pins_the_first_nodes_in_name_order_that_have_the_same_free_slots() -> None:
    """2 GPUs on each of 2 nodes. n1 is full; n2 and n3 have slots 1 and 2 free; n4 has 0..2
    free. The first node with two free slots is n2 (slots 1, 2), and the next one with those
    slots free is n3 (n4 would do as well, but comes later)."""
    nodes = [node("n1", used=(0, 1, 2, 3)), node("n2", used=(0, 3)), node("n3", used=(0, 3)), node("n4", used=(3,))]
    user = _user_job()
    view = cluster_view.build_view(nodes, [user], factors(SF), CLASSES)
    u = fallback_update(user, view)
    assert u is not None
    assert (u.tres_per_node, u.node_list) == ("gres:gpu:v100_g1:1,gres:gpu:v100_g2:1", "n2,n3")
    assert [(s.node, s.minor) for s in u.slots] == [("n2", 1), ("n2", 2), ("n3", 1), ("n3", 2)]


def test_the_rescue_skips_a_first_node_no_other_node_matches() -> None:
    """n2 has slots 0, 1 free, and no other node has both free; n3 and n4 have 1, 2 free."""
    nodes = [node("n1", used=(0, 1, 2, 3)), node("n2", used=(2, 3)), node("n3", used=(0, 3)), node("n4", used=(0, 3))]
    user = _user_job()
    u = fallback_update(user, cluster_view.build_view(nodes, [user], factors(SF), CLASSES))
    assert u is not None and (u.tres_per_node, u.node_list) == ("gres:gpu:v100_g1:1,gres:gpu:v100_g2:1", "n3,n4")


def test_with_no_node_free_the_rescue_sets_the_lowest_slots_and_pins_no_node() -> None:
    """Every node down: the user's shape as per-slot types of the first node (other GRES kept),
    no node list, so any node with those slots free can take the job once one comes back."""
    down = [node(f"n{i}", state="DOWN") for i in range(1, 5)]
    user = _user_job(tpn="gres:gpu:2,gres:mps:50")
    u = fallback_update(user, cluster_view.build_view(down, [user], factors(SF), CLASSES))
    assert u == Update(job_id="1", clear_field="TresPerNode",
                       tres_per_node="gres:gpu:v100_g0:1,gres:gpu:v100_g1:1,gres:mps:50", node_list="", slots=(),
                       original=("tres_per_node", "gres:gpu:2,gres:mps:50"))


def test_the_unpinned_rescue_may_ask_for_every_slot_of_a_node() -> None:
    down = [node(f"n{i}", state="DOWN") for i in range(1, 5)]
    user = _user_job(tpn="gres:gpu:4", nodes=1)
    u = fallback_update(user, cluster_view.build_view(down, [user], factors(SF), CLASSES))
    assert u is not None and u.tres_per_node == ",".join(f"gres:gpu:v100_g{m}:1" for m in range(4))


# --------------------------------------------------------------------------- a --gpus job's other GRES


def test_a_gpus_per_job_request_keeps_the_other_gres_it_asks_for_per_node() -> None:
    """`--gpus=2 --gres=mps:10`: the per-slot request replaces TresPerNode whole, so it carries
    the job's per-node mps too; before, placing the job dropped it."""
    j = job("1", tpn="gres:mps:10", tpj="gres:gpu:2")
    view = cluster_view.build_view(FOUR, [j], factors(SF), CLASSES)
    shape = shapes.request_shape(j, 4)
    assert not isinstance(shape, str)
    u = slurm_updates.update_for(j, shape, [0, 1], view)
    assert u.tres_per_node == "gres:gpu:v100_g0:1,gres:gpu:v100_g1:1,gres:mps:10"
    assert check_update(shape, u) is None
    down = [node(f"n{i}", state="DOWN") for i in range(1, 5)]
    tag = Tag(head=PLACED, job_class="A", was=(("tres_per_node", "gres:mps:10"), ("tres_per_job", "gres:gpu:2")),
              intent=u.tres_per_node, nodes="n1").render()
    placed = job("1", tpn=u.tres_per_node, tpj="", required_nodes="n1", admin_comment=tag)
    rescue = fallback_update(placed, cluster_view.build_view(down, [placed], factors(SF), CLASSES))
    assert rescue is not None and rescue.tres_per_node == "gres:gpu:v100_g0:1,gres:gpu:v100_g1:1,gres:mps:10"


def test_a_gpus_per_job_request_with_an_unreadable_per_node_entry_is_left_to_slurm() -> None:
    assert shapes.request_shape(job("1", tpn="cpu=4", tpj="gres:gpu:2"), 4) == \
        "unreadable request 'cpu=4': placed by Slurm"


def test_a_gpus_per_job_requests_own_other_gres_are_kept_once() -> None:
    j = job("1", tpn="gres:mps:10", tpj="gres:gpu:2,gres:mps:10,gres:shard:2")
    view = cluster_view.build_view(FOUR, [j], factors(SF), CLASSES)
    shape = shapes.request_shape(j, 4)
    assert not isinstance(shape, str)
    u = slurm_updates.update_for(j, shape, [0, 1], view)
    assert u.tres_per_node == "gres:gpu:v100_g0:1,gres:gpu:v100_g1:1,gres:mps:10,gres:shard:2"
