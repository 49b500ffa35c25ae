"""The cost of running rows of several LoRA adapters in one forward (issue 39), on one model, no server.

One model of ``--preset`` (random weights) with ``--adapters`` LoRA adapters (rank ``--rank``, NeoBERT's qkv /
wo / w12 / w3), a batch of ``--batch`` rows of ``--length`` tokens, timed interleaved (``--rounds`` rounds of
every path in turn; the median of each; ratios only, as the machine may be shared):

* ``base``: the base alone (peft's adapters disabled);
* ``peft active``: every row through adapter 0, peft's active adapter (``set_adapter``);
* ``peft names, one``: every row through adapter 0, named per row (peft's ``adapter_names``);
* ``peft names, mixed``: the rows spread over every adapter, named per row (``adapter_names``: each LoRA
  layer gathers each adapter's rows and scatters its output back);
* ``ours, one`` / ``ours, mixed``: the same rows tagged as the service tags them
  (:data:`neobert.inference.run.ROW_TAGS`, each adapter's rows contiguous as ``batched_inputs`` orders
  them), run by :func:`neobert.inference.kinds.adapter.route_rows`' LoRA layers (each adapter's delta added
  to its rows' slice).

Every path is checked against peft's ``adapter_names`` output (within 1e-5) before timing. Prints a markdown
table (milliseconds, and each path's throughput as a share of the base's).

    python docs/benchmarks/several_models/lora_paths.py                      # the 'small' shape, 1 thread
    python docs/benchmarks/several_models/lora_paths.py --preset tiny --rounds 2   # a check, in seconds
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import peft

    from neobert.inference.encoders import load_model
    from neobert.inference.kinds.adapter import route_rows
    from neobert.inference.run import ROW_TAGS, RowTags

    warnings.filterwarnings("ignore", category=FutureWarning)
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    names = [f"a{i}" for i in range(args.adapters)]

    def adapted() -> object:
        torch.manual_seed(0)
        model = load_model(args.preset, "base", vocab_size=30522)
        config = peft.LoraConfig(
            r=args.rank, target_modules=["qkv", "wo", "w12", "w3"], init_lora_weights=False
        )
        wrapper = peft.get_peft_model(model, config, adapter_name=names[0])
        for name in names[1:]:
            wrapper.add_adapter(name, config)
        return wrapper.eval()

    theirs, ours = adapted(), adapted()
    ours.load_state_dict(theirs.state_dict())
    route_rows(ours.base_model.model)
    ids = torch.randint(5, 30000, (args.batch, args.length))
    mask = torch.ones_like(ids)
    mixed = sorted(names[i % len(names)] for i in range(args.batch))  # each adapter's rows contiguous
    one = [names[0]] * args.batch

    def peft_base() -> torch.Tensor:
        with theirs.disable_adapter():
            return theirs(input_ids=ids, attention_mask=mask)[0]

    def peft_active() -> torch.Tensor:
        theirs.set_adapter(names[0])
        return theirs(input_ids=ids, attention_mask=mask)[0]

    def peft_names(rows: list[str]):
        return lambda: theirs(input_ids=ids, attention_mask=mask, adapter_names=rows)[0]

    def tagged(rows: list[str]):
        def run() -> torch.Tensor:
            outer = ROW_TAGS.set(RowTags(tuple(rows), (args.length,) * args.batch))
            try:
                return ours(input_ids=ids, attention_mask=mask)[0]
            finally:
                ROW_TAGS.reset(outer)

        return run

    paths = {
        "base": peft_base,
        "peft active": peft_active,
        "peft names, one": peft_names(one),
        "peft names, mixed": peft_names(mixed),
        "ours, one": tagged(one),
        "ours, mixed": tagged(mixed),
    }
    with torch.inference_mode():
        for rows, path in ((one, "ours, one"), (mixed, "ours, mixed"), (one, "peft active")):
            expected = peft_names(rows)()
            torch.testing.assert_close(paths[path](), expected, atol=1e-5, rtol=1e-5)
            assert (expected - peft_base()).abs().max() > 1e-3  # the adapters do change the outputs
        times: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(args.rounds):
            for name, path in paths.items():
                start = time.perf_counter()
                path()
                times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    print(
        f"{args.preset}, {args.adapters} adapters of rank {args.rank}, {args.batch} rows x {args.length} "
        f"tokens, {args.threads} thread(s), median of {args.rounds} interleaved rounds\n"
    )
    print("| path | ms | throughput / base |\n|---|---:|---:|")
    for name, seconds in median.items():
        print(f"| {name} | {seconds * 1000:.1f} | {median['base'] / seconds:.2f} |")


if __name__ == "__main__":
    main()
