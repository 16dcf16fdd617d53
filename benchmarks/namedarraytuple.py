"""Cost of indexing, slicing and assigning a 5-field namedarraytuple of [T, B] arrays,
against doing the same to each of the five arrays by hand (the floor: numpy's own work).

    python benchmarks/namedarraytuple.py           # full run
    python benchmarks/namedarraytuple.py --quick   # seconds; checks it still works

Prints, per operation, nanoseconds per call for the namedarraytuple (class and schema
forms) and by hand, and the ratio namedarraytuple / by hand (1.0 = no overhead).
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np

from rl_arrays import NamedArrayTupleSchema, namedarraytuple

FIELDS = ["observation", "action", "reward", "done", "value"]
Step = namedarraytuple("Step", FIELDS)
StepSchema = NamedArrayTupleSchema("Step", FIELDS)


def make_arrays(T: int, B: int) -> list[np.ndarray]:
    return [
        np.zeros((T, B, 16), np.float32),
        np.zeros((T, B), np.int64),
        np.zeros((T, B), np.float32),
        np.zeros((T, B), np.bool_),
        np.zeros((T, B), np.float32),
    ]


def operations(T: int, B: int, form: object) -> dict[str, tuple[object, object]]:
    """For each operation: (namedarraytuple statement, the same by hand)."""
    o, a, r, d, v = arrays = make_arrays(T, B)
    nat = form(*arrays)  # type: ignore[operator]
    step = form(np.ones(16, np.float32), 1, 1.0, True, 0.5)  # type: ignore[operator]
    s_o, s_a, s_r, s_d, s_v = step
    chunk = nat[0:8]
    c_o, c_a, c_r, c_d, c_v = chunk
    return {
        "index [t, b]": (
            lambda: nat[3, 2],
            lambda: (o[3, 2], a[3, 2], r[3, 2], d[3, 2], v[3, 2]),
        ),
        "slice [t0:t1]": (
            lambda: nat[8:16],
            lambda: (o[8:16], a[8:16], r[8:16], d[8:16], v[8:16]),
        ),
        "assign [t, b] = step": (
            lambda: nat.__setitem__((3, 2), step),
            lambda: (
                o.__setitem__((3, 2), s_o),
                a.__setitem__((3, 2), s_a),
                r.__setitem__((3, 2), s_r),
                d.__setitem__((3, 2), s_d),
                v.__setitem__((3, 2), s_v),
            ),
        ),
        "assign [t0:t1] = chunk": (
            lambda: nat.__setitem__(slice(8, 16), chunk),
            lambda: (
                o.__setitem__(slice(8, 16), c_o),
                a.__setitem__(slice(8, 16), c_a),
                r.__setitem__(slice(8, 16), c_r),
                d.__setitem__(slice(8, 16), c_d),
                v.__setitem__(slice(8, 16), c_v),
            ),
        ),
        "assign [t] = 0": (
            lambda: nat.__setitem__(5, 0),
            lambda: (
                o.__setitem__(5, 0),
                a.__setitem__(5, 0),
                r.__setitem__(5, 0),
                d.__setitem__(5, 0),
                v.__setitem__(5, 0),
            ),
        ),
    }


def best_ns(func: object, number: int, repeat: int) -> float:
    return min(timeit.repeat(func, number=number, repeat=repeat)) / number * 1e9  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds, no timing claims")
    parser.add_argument("-T", type=int, default=128)
    parser.add_argument("-B", type=int, default=16)
    args = parser.parse_args()
    number, repeat = (200, 2) if args.quick else (20_000, 7)

    print(
        f"5-field namedarraytuple of [T={args.T}, B={args.B}] arrays; ns per call, best of {repeat}"
    )
    header = f"{'operation':<24}{'class ns':>10}{'schema ns':>11}{'by hand ns':>12}{'class/hand':>12}{'schema/hand':>13}"
    print(header)
    print("-" * len(header))
    by_form = {
        name: operations(args.T, args.B, form)
        for name, form in [("class", Step), ("schema", StepSchema)]
    }
    for op in by_form["class"]:
        class_ns = best_ns(by_form["class"][op][0], number, repeat)
        schema_ns = best_ns(by_form["schema"][op][0], number, repeat)
        hand_ns = best_ns(by_form["class"][op][1], number, repeat)
        print(
            f"{op:<24}{class_ns:>10.0f}{schema_ns:>11.0f}{hand_ns:>12.0f}"
            f"{class_ns / hand_ns:>12.2f}{schema_ns / hand_ns:>13.2f}"
        )


if __name__ == "__main__":
    main()
