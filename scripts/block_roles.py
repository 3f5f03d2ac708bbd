#!/usr/bin/env python3
"""Write a block-roles table (MONOLITH_BLOCK_ROLES, nineteenth session's experiment): every KV group's
blocks on one side of the L2, or a random permutation as the control.

Inputs: the SM of each block of a launch of the variant (a calibration launch, `block_sms`, on the GPU)
and the side of each SM from probes/l2_partition.cu's JSON (`side_of_sm`). `--order sides` sorts the
blocks by (side, block index) and gives them roles in that order: a KV group is a run of G / 8
consecutive roles (make_plan), so every group but at most one lies on one side, and the group's first
blocks (its attention splits) with it. `--order random --seed S` is a random permutation (the control:
what moving roles around does by itself). Any permutation computes the same tokens.

Use: python scripts/block_roles.py --probe results/m4_l2_partition.json --variant fp8-stream \
         --blocks 128 --out results/block_roles.json
     then MONOLITH_NVCC_DEFINES=MONOLITH_BLOCK_ROLES=1 MONOLITH_BLOCK_ROLES_FILE=results/block_roles.json ...
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from monolith import config as C  # noqa: E402
from monolith.errors import MonolithError  # noqa: E402


def roles_by_side(sm_of_block: list[int], side_of_sm: dict[int, int]) -> list[int]:
    """roles[b]: blocks sorted by (their SM's side, b), numbered in that order. An SM the probe did
    not see counts as side 0."""
    order = sorted(range(len(sm_of_block)), key=lambda b: (side_of_sm.get(sm_of_block[b], 0), b))
    roles = [0] * len(sm_of_block)
    for r, b in enumerate(order):
        roles[b] = r
    return roles


def group_sides(roles: list[int], sm_of_block: list[int], side_of_sm: dict[int, int], groups: int) -> list[list[int]]:
    """Per KV group (runs of len(roles) / groups roles, as make_plan cuts them when that divides):
    [blocks on side 0, blocks on side 1]."""
    n = len(roles)
    out = [[0, 0] for _ in range(groups)]
    for b, r in enumerate(roles):
        out[r * groups // n][side_of_sm.get(sm_of_block[b], 0)] += 1
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe", required=True, help="probes/l2_partition.cu's JSON (side_of_sm)")
    ap.add_argument("--variant", default="fp8-stream")
    ap.add_argument("--blocks", type=int, default=128)
    ap.add_argument("--order", choices=("sides", "random"), default="sides")
    ap.add_argument("--seed", type=int, default=0, help="--order random's seed")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        probe = json.loads(Path(a.probe).read_text())
        side_of_sm = {int(s): int(d) for s, d in probe["side_of_sm"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"block_roles: {a.probe} is not the l2_partition probe's JSON: {e!r}") from e
    if a.blocks % C.NUM_KV_HEADS:
        raise SystemExit(f"block_roles: --blocks {a.blocks} is not a multiple of the {C.NUM_KV_HEADS} KV groups")
    from monolith import kernel_spec
    from monolith.megakernel import load_extension

    try:
        ext = load_extension(a.variant)
        vid = int(kernel_spec.variant_spec(a.variant)["id"])
        sms = [int(x) for x in ext.block_sms(vid, a.blocks, False)]
        sms_again = [int(x) for x in ext.block_sms(vid, a.blocks, False)]
    except MonolithError as e:
        raise SystemExit(f"block_roles: {e}") from e
    if a.order == "sides":
        roles = roles_by_side(sms, side_of_sm)
    else:
        roles = list(range(a.blocks))
        random.Random(a.seed).shuffle(roles)
    out = {"variant": a.variant, "blocks": a.blocks, "order": a.order, "seed": a.seed if a.order == "random" else None,
           "sm_of_block": sms, "placement_repeats": sms == sms_again,
           "side_of_sm": sorted(side_of_sm.items()), "roles": roles,
           "group_sides": group_sides(roles, sms, side_of_sm, C.NUM_KV_HEADS)}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out))
    print(f"{a.out}: {a.order}; placement repeats: {out['placement_repeats']}; "
          f"blocks per group on side 0 / 1: {out['group_sides']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
