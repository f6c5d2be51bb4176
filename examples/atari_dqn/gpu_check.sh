#!/usr/bin/env bash
# The DQN's GPU figures, on a one-GPU machine with 16 cores (issue 24), in one script.
#
# From the repository root, with the package and its atari extra installed
# (pip install -c constraints.txt -e ".[test,atari]"):
#
#   OUT=/tmp/gpu-out bash examples/atari_dqn/gpu_check.sh            # every step
#   OUT=/tmp/gpu-out STEPS="throughput eval" bash examples/atari_dqn/gpu_check.sh
#
# Steps (each bounded by `timeout`, each writing under $OUT, each going on if one fails):
#   machine     nvidia-smi, cores, versions, whether CUDA MPS is installed
#   learner     tests/gpu/test_gpu_dqn_learner.py (the learner's GPU code paths, 1 min),
#               then python -m benchmarks.dqn_learner: the learner alone on the GPU, gradient
#               steps/s and samples/s at batch 32, 128, 512 and 1024 (the Pong preset's
#               replay ratio), with and without a device sync per step, and the frames/s
#               each pays for at 8 samples per transition (target: 15,000), and
#               torch.profiler over 20 steps at 1,024 (learner_profile.json, a Chrome
#               trace): how busy the GPU's kernels keep it, the kernels that take the
#               most (about 1 min)
#   throughput  python -m benchmarks.dqn_throughput: the raw ALE vector env against the
#               example's collection with the learner training at the preset's replay
#               ratio (8 samples per transition; the learner on the GPU trains on its
#               default batch there, 512), 12 collectors, --transport cpu then cuda; then
#               --transport cpu at --batch-size 32 (the batch of the runs in issue 24), to
#               tell the batch's share of the change from the rest. Each prints the raw
#               ALE rate, the DQN's rate, their ratio, updates/s, the batch, the replay
#               ratio kept and how busy the training thread was (about 3 x 2 min).
#               THROUGHPUT_RUNS names the runs, each name its flags: the transport, then
#               any of graph (--cuda-graph), per (--prioritized), bN (--batch-size N),
#               rN (--replay-ratio N), mN (--max-replay-ratio N),
#               e.g. "cpu cuda cpu-b32" (the default) or "cpu-graph cpu-graph-r16";
#               with two runs or more, benchmarks.dqn_pick_batch names the batch a timed
#               Pong run should take from them (its docstring gives the rule)
#   graphtest   the CUDA-graph tests of tests/gpu/test_gpu_dqn_learner.py alone (a
#               replayed step against an eager one on the same batch, the graphed
#               learner's thread among CUDA pushes); when they fail, the later pong and
#               timeline runs drop --cuda-graph, unless only the prioritized cases failed
#               and neither run is --prioritized (20 s)
#   graph       tests/gpu/test_gpu_dqn_learner.py (the graph gate as above), then the
#               learner at $GRAPH_BATCHES (default 512), $GRAPH_MODES (default eager and
#               graph: --cuda-graph; -per adds --prioritized, -cl --channels-last, e.g.
#               graph-per or graph-cl; with a -cl mode, tests/gpu/test_gpu_dqn_channels_last.py
#               first, outside the gate), alone
#               and in its thread with 48 threads pushing (--pushers 48: the 12
#               collectors' pushes in flight) (about 2 min)
#   timeline    the example with $COLLECTORS collectors, --transport $TL_TRANSPORT
#               (default cuda), $TL_EXTRA and --trace,
#               Pong, $TL_FRAMES frames (default 400,000): its timeline holds each
#               gradient step on the learner's thread and on its GPU (cuda:0 track,
#               with how far the GPU trails the thread), and each collector's collection
#               and waits; the run prints where the time went
#               (examples/atari_dqn/timeline_report.py) (about 1 min)
#   eval        the README's default run (Pong, 2 collectors, 40,000 frames) and the
#               issue's 4-collector cuda run (60,416 frames, with --trace: its
#               timeline.json shows where the time goes): the final evaluation's
#               share of the wall time (target: at most 15%) (about 2 min)
#   pong        the one-GPU recipe of the README (12 collectors, --transport
#               $PONG_TRANSPORT (default cuda), GPU shares fitted automatically, the
#               learner's batch 512), $PONG_FRAMES frames (default 6M), cut at $PONG_S s
#               (default 11 min), or trained until $DEADLINE_S s after the script's start
#               less $PONG_END_S; its learning curve is in $OUT/pong (metrics.csv,
#               learning_curve.png)
#   tcp         (not in the default STEPS) the throughput benchmark, --transport cpu, with
#               ACTORRT_TP_TRANSPORTS=uv: TensorPipe's shm reactor busy-polls a core in
#               every process that has it (docs/performance.md), and 12 collectors, the
#               learner, the driver and the zygote (15 processes on 16 cores) keep it on;
#               this shows whether those spinning threads hold collection back (2 min)
#   objects     python -m benchmarks.objects_gpu: a 640 MB CUDA tensor's ref passed
#               between two actors on one GPU against a direct call (issue 23; 1 min)
#   gputest     (not in the default STEPS) tests/gpu/test_gpu_atari_dqn.py,
#               tests/gpu/test_gpu_dqn_learner.py, tests/gpu/test_gpu_dqn_channels_last.py
#               (the learner's NHWC layout), tests/gpu/test_gpu_objects.py and
#               tests/gpu/test_gpu_functions.py (remote functions on GPU slots, issue 26)
#               and tests/gpu/test_gpu_streams.py (CUDA arguments and replies read after
#               they land): the cuda transport with hand-set shares and without any GPU
#               flag, CUDA objects GPU to GPU (about 4 min; GPUTEST_FILES picks files)
# About 20 minutes in all. Every figure lands in $OUT/summary.txt. With PACK=FILE the
# results are packed at the end into one FILE.tar.gz, less what is too big to bring back
# (checkpoints, TensorBoard event files): PACK="$OUT_OF_THE_DEVICE/gpu-check".
#
# Where GPU time comes in short loans (one command of at most 10 minutes, about 15
# minutes of machine time in all, start-up included), on one H200 these took: the eval
# step 45 s; the learner alone (512, 1024, with --profile) 40 s; the timeline step at
# 300,000 frames 40 s; the throughput step's cpu and cuda runs 100 s together at
# TP_S=110; Pong 10M frames 427 s (docs/performance.md, "second loan").
#
# The third loan (docs/performance.md) answered the graph's questions: its tests pass on
# an H200, a graphed step makes 1.50x the eager steps alone and 1.31x beside 48 pushing
# threads. In the example (--transport cuda) the steady state was the collectors' pace
# (about 130 steps/s, no push held), the learner's GPU steps stretched to about 5 ms
# against 2.6 alone (the 12 collectors acting on the same GPU, likely), and the learner
# made at most about 165 steps/s while it caught up. Its 10-minute Pong (--cuda-graph,
# batch 512, 8 samples per transition) ended at -13.00. The machine's start and the
# transfers took about 50 s; graphtest 20 s.
#
# The next loan: with the collectors acting on the CPU (--transport cpu; on the second
# loan acting took them 6% of their time there against 13% on the GPU) the learner has
# the GPU alone, and --max-replay-ratio 32 lets it take every step it has time for, up
# to 32 samples per transition, while the collectors never wait below the preset's 8.
# The runs at 512 made 16 times fewer steps per frame than the Nature DQN's batch of
# 32, the likely first reason Pong learned slowly per frame; this spends all the
# learner's room on steps without throttling collection. Two commands, about 3.5 and
# 9.5 minutes (with the machine's start, about 14 of a loan's 15 device minutes; $OUT_BACK
# is the device's own $OUT, the folder that comes back):
#
#   OUT=/tmp/g1 STEPS="machine graphtest throughput timeline" TP_S=110 \
#       THROUGHPUT_RUNS="cpu-graph-m32 cpu-graph-b128-m32" TL_TRANSPORT=cpu \
#       TL_EXTRA="--cuda-graph --max-replay-ratio 32" TL_FRAMES=300000 \
#       PACK=$OUT_BACK/g1 bash examples/atari_dqn/gpu_check.sh
#   OUT=/tmp/g2 STEPS="graphtest pong" DEADLINE_S=580 PONG_FRAMES=100000000 \
#       PONG_TRANSPORT=cpu PONG_PICK=/tmp/g1/pick-batch.log GRAPHTEST_FROM=/tmp/g1 \
#       PONG_EXTRA="--cuda-graph --max-replay-ratio 32 --eval-max-frames 0 \
#       --learning-starts 50000 --sticky-actions 0" PACK=$OUT_BACK/pong \
#       bash examples/atari_dqn/gpu_check.sh
#
# The second command is `python -m examples.atari_dqn --recipe pong-10min`
# (config.RECIPES) with its flags spelled out, so that the graph gate can drop
# --cuda-graph, and with its training time fitted to the command's. The timeline run
# shows where the time goes with the learner free to step: its GPU should be the limit,
# the issue's goal for the timeline. The Pong run takes its batch from the first
# command's benchmarks.dqn_pick_batch line (PONG_PICK; of the runs that kept at least
# 15,000 frames/s, the most updates/s x sqrt(batch): a step of 512 at 4e-4 counts as
# about two of 128 at 2e-4 under the square-root rule the learning rates follow; a
# heuristic, not a measurement; the larger batch within 5%). The two runs bracket the
# batch: the recipe's 512 and 128 (lr 2e-4, a target copy every 500 steps). The third
# loan's graphed step at 512 took about 2.6 ms of the GPU whether or not the host waited
# for it; if little of that is a fixed cost per step, 128 makes three to four times the
# steps and wins the pick (and beats 256), and if much of it is, 512 does about as well
# as 256 would: probing 128 rather than 256 covers both. Send the second command as
# soon as the first returns, without reading its results first: a machine idle for
# 30 s is given back, and a fresh one costs about 50 s of the 15 minutes to start and
# has lost /tmp/g1 (the Pong run then keeps the recipe's 512, and says so, and the
# graph tests run again). On the warm machine the second command gates the graph on the
# first's test verdict (GRAPHTEST_FROM), so Pong trains those 20 s longer.
#
# The emulator is new as well: the recipe turns sticky actions off (--sticky-actions 0),
# the deterministic ALE with up to 30 no-op starts that the Nature DQN, Ape-X, EnvPool's
# and RLlib's Pong, and CleanRL's PongNoFrameskip-v4 train and score on; the three loans'
# runs had ALE/Pong-v5's own 0.25, which "--sticky-actions 0.25" in PONG_EXTRA repeats.
# The target period is new too: a copy every 250 steps at 512 (config.with_batch_size
# keeps the preset's learning rate times steps between copies; 354 at 256), where the
# three loans' runs copied every 62; --target-update-every 62 in PONG_EXTRA repeats
# them. `--n-step 3` did not learn at lr 4e-4 with the old period (performance.md); to
# try it again, add "--n-step 3". `--prioritized` (Ape-X's prioritized replay) is new
# and has not run on a GPU: graphtest checks its graphed step against an eager one, and
# `graph` with GRAPH_MODES="graph graph-per" times its cost (about 1 min); keep it out
# of a Pong run until both are known. `--dueling` and `--exploration ape-x` (the rest
# of Ape-X's DQN) are new too and unrun on Atari. So is --channels-last (the learner's
# CNNs in the NHWC layout cuDNN's tensor cores use; same values): STEPS=graph with
# GRAPH_MODES="graph graph-cl" times it against the plain graphed step (about 2 min with
# the tests), before any Pong run uses it.
# Each run's logdir holds its checkpoint.pt (27 MB for Pong): PACK leaves those out.
# graphtest, and graph's own tests, drop --cuda-graph from the later pong and
# timeline runs when they fail.
#
# Not --trace on the Pong run: 500 s of traced gradient steps (a span per part, and
# its CUDA events) come near trace.MAX_EVENTS in the learner alone, and gathering and
# writing them could outlast PONG_S, losing the final evaluation's line.
set -u
OUT=${OUT:?set OUT to the folder for the results}
PYTHON=${PYTHON:-python}
STEPS=${STEPS:-machine learner throughput timeline eval pong objects}
COLLECTORS=${COLLECTORS:-12}
THROUGHPUT_RUNS=${THROUGHPUT_RUNS:-cpu cuda cpu-b32}  # the throughput step's runs
TP_FRAMES=${TP_FRAMES:-120000}  # the DQN phase of each throughput run
TL_FRAMES=${TL_FRAMES:-400000}  # the timeline step's run
TL_TRANSPORT=${TL_TRANSPORT:-cuda}  # cpu: collectors on the CPU (a learner takes the GPU if any)
TL_EXTRA=${TL_EXTRA:-}  # more flags for the timeline run (e.g. --cuda-graph)
PONG_S=${PONG_S:-660}
# Each run's bound in seconds. Bound a loan's steps here, not with an outer `timeout`:
# each run's own `timeout` ends its process group (the cluster with it) before the next.
TP_S=${TP_S:-400}          # each throughput (and tcp) run
EVAL_S=${EVAL_S:-300}      # each of the eval step's two runs
GPUTEST_S=${GPUTEST_S:-500}
GPUTEST_FILES=${GPUTEST_FILES:-tests/gpu/test_gpu_atari_dqn.py tests/gpu/test_gpu_dqn_learner.py tests/gpu/test_gpu_dqn_channels_last.py tests/gpu/test_gpu_objects.py tests/gpu/test_gpu_functions.py tests/gpu/test_gpu_streams.py tests/gpu/test_gpu_profile.py}
# 6M frames (the README's recipe) took 240 s on an H200 (docs/performance.md);
# PONG_FRAMES=14000000 fills the issue's 10 minutes at that pace; 11000000 with PONG_S=530
# fits one 10-minute command with its start-up and evaluations (neither run yet).
PONG_FRAMES=${PONG_FRAMES:-6000000}
# --train-seconds for the Pong run: set it (with PONG_FRAMES far beyond reach) to train
# for a fixed time and still get the final evaluation, e.g. PONG_TRAIN_S=530 PONG_S=590
PONG_TRAIN_S=${PONG_TRAIN_S:-}
PONG_EXTRA=${PONG_EXTRA:-}  # more flags for the Pong run (e.g. --eval-max-frames 0)
# PONG_PICK: an earlier throughput step's pick-batch.log (e.g. /tmp/g1/pick-batch.log, on a
# machine still warm from it): its "pick: --batch-size N" becomes the Pong run's batch,
# unless PONG_EXTRA names one; no such file or line: the recipe's batch, said so.
PONG_PICK=${PONG_PICK:-}
# GRAPHTEST_FROM: an earlier command's $OUT (e.g. /tmp/g1) on a machine still warm from it:
# the graphtest step gates on the verdict kept there instead of running the tests again;
# nothing kept there (a fresh machine): it runs them.
GRAPHTEST_FROM=${GRAPHTEST_FROM:-}
# DEADLINE_S: seconds after this script's start by which the Pong run must have ended;
# its bound and its --train-seconds are then what is left when it starts (less
# PONG_END_S for the start-up, the final evaluation's 8 whole games and the shutdown:
# 40 s of them on an H200, 17 s the evaluation), so the earlier steps take what they take.
DEADLINE_S=${DEADLINE_S:-}
PONG_TRANSPORT=${PONG_TRANSPORT:-cuda}
PONG_END_S=${PONG_END_S:-60}
GRAPH_BATCHES=${GRAPH_BATCHES:-512}  # the graph step's learner batches (e.g. 128,256,512)
GRAPH_MODES=${GRAPH_MODES:-eager graph}  # the graph step's learner runs
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
note() { echo "$*" | tee -a "$SUMMARY"; }
T0=$(date +%s)

# After the CUDA-graph tests (exit status, log): when they fail, the later steps run
# eager, so that one broken capture does not cost the loan's Pong run. When only the
# prioritized cases failed (test ids ending in [prioritized]) and neither later run
# samples by priority, the uniform graph those runs use passed: it stays.
graph_gate() {
    note "  tests/gpu/test_gpu_dqn_learner.py (exit $1): $(tail -1 "$2")"
    grep -E '^(FAILED|ERROR)' "$2" | sed 's/^/    /' | tee -a "$SUMMARY"
    if [ "$1" != 0 ] && grep -qE '^(FAILED|ERROR)' "$2" \
        && ! grep -E '^(FAILED|ERROR)' "$2" | grep -qv '\[prioritized\]' \
        && [[ "$PONG_EXTRA $TL_EXTRA" != *--prioritized* ]]; then
        note "  only prioritized cases failed and no later run is prioritized: --cuda-graph kept"
    elif [ "$1" != 0 ]; then
        PONG_EXTRA=${PONG_EXTRA//--cuda-graph/}
        TL_EXTRA=${TL_EXTRA//--cuda-graph/}
        note "  the graph tests failed: --cuda-graph dropped from the pong and timeline runs"
    fi
}

# What each run took from its final line: "... wall=NNs (final evaluation X.Ys) ..."
eval_share() {
    local log=$1 wall ev
    wall=$(grep -o 'wall=[0-9]*s' "$log" | tail -1 | tr -dc '0-9')
    ev=$(grep -o 'final evaluation [0-9.]*s' "$log" | tail -1 | tr -dc '0-9.')
    if [ -n "$wall" ] && [ -n "$ev" ]; then
        note "  final evaluation ${ev} s of ${wall} s: $(awk -v e="$ev" -v w="$wall" 'BEGIN{printf "%.1f%%", 100*e/w}')"
    else
        note "  no final line (see $log)"
    fi
}

# The lines a --trace run prints about where its time went (timeline_report.py).
where_time_went() {
    grep -E '^(timeline:|training phase|learner thread|learner GPU|collectors:|second half|the limit)' "$1" \
        | sed 's/^/    /' | tee -a "$SUMMARY"
}

for step in $STEPS; do
    note "== $step $(date -u +%FT%TZ)"
    case $step in
    machine)
        nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
        # MPS would let the collectors' kernels and the learner's run at once instead of
        # time-slicing the GPU between their processes (docs/performance.md, third loan)
        note "  MPS control daemon: $(command -v nvidia-cuda-mps-control || echo 'not installed')"
        note "  cores $(nproc); $($PYTHON -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.device_count(), "GPU(s)")')"
        ;;
    learner)
        timeout 240 $PYTHON -m pytest -p no:cacheprovider -q tests/gpu/test_gpu_dqn_learner.py \
            > "$OUT/learner-test.log" 2>&1
        note "  tests/gpu/test_gpu_dqn_learner.py (exit $?): $(tail -1 "$OUT/learner-test.log")"
        timeout 240 $PYTHON -m benchmarks.dqn_learner --batch-sizes 32,128,512,1024 \
            --seconds 5 --json "$OUT/learner.json" --profile "$OUT/learner_profile.json" \
            > "$OUT/learner.log" 2>&1
        note "  the learner alone (exit $?):"
        grep -E '^(batch|profiled|    )' "$OUT/learner.log" | sed 's/^/    /' | tee -a "$SUMMARY"
        ;;
    throughput)
        # A run's name says its flags: the transport (cpu, cuda), then any of "graph"
        # (--cuda-graph), per (--prioritized), bN (--batch-size N), rN (--replay-ratio N),
        # mN (--max-replay-ratio N).
        ran=()
        for name in $THROUGHPUT_RUNS; do
            transport=${name%%-*}
            case $transport in
            cpu | cuda) ;;
            *) note "  throughput run $name: begin its name with cpu or cuda"; continue ;;
            esac
            set --
            for part in $(echo "${name#"$transport"}" | tr '-' ' '); do
                case $part in
                graph) set -- "$@" --cuda-graph ;;
                b[0-9]*) set -- "$@" --batch-size "${part#b}" ;;
                r[0-9]*) set -- "$@" --replay-ratio "${part#r}" ;;
                m[0-9]*) set -- "$@" --max-replay-ratio "${part#m}" ;;
                per) set -- "$@" --prioritized ;;
                *) note "  throughput run $name: unknown part $part (graph, per, bN, rN, mN)"; continue 2 ;;
                esac
            done
            timeout "$TP_S" $PYTHON -m benchmarks.dqn_throughput --collectors "$COLLECTORS" \
                --transport "$transport" --frames "$TP_FRAMES" --raw-seconds 10 "$@" \
                --json "$OUT/throughput-$name.json" > "$OUT/throughput-$name.log" 2>&1
            note "  $name: transport $transport $* (exit $?):"
            grep -E '^(GPUs:|raw|DQN|ratio)' "$OUT/throughput-$name.log" | sed 's/^/    /' | tee -a "$SUMMARY"
            ran+=("$OUT/throughput-$name.json")
        done
        if [ "${#ran[@]}" -gt 1 ]; then  # the batch for a timed Pong run, by a stated rule
            $PYTHON -m benchmarks.dqn_pick_batch "${ran[@]}" > "$OUT/pick-batch.log" 2>&1
            note "  benchmarks.dqn_pick_batch (exit $?):"
            sed 's/^/    /' "$OUT/pick-batch.log" | tee -a "$SUMMARY"
        fi
        ;;
    timeline)
        # shellcheck disable=SC2086  # TL_EXTRA is a list of flags
        timeout "$EVAL_S" $PYTHON -m examples.atari_dqn --no-progress --collectors "$COLLECTORS" \
            --transport "$TL_TRANSPORT" --total-frames "$TL_FRAMES" --trace $TL_EXTRA \
            --logdir "$OUT/timeline" > "$OUT/timeline.log" 2>&1
        note "  $COLLECTORS collectors, $TL_TRANSPORT, $TL_FRAMES frames, traced $TL_EXTRA (exit $?):"
        where_time_went "$OUT/timeline.log"
        ;;
    graphtest)
        if [ -n "$GRAPHTEST_FROM" ] && [ -s "$GRAPHTEST_FROM/graphtest.rc" ]; then
            # the same machine ran them for an earlier command: its verdict, not 20 s more
            note "  the graph tests as $GRAPHTEST_FROM ran them"
            graph_gate "$(cat "$GRAPHTEST_FROM/graphtest.rc")" "$GRAPHTEST_FROM/graphtest.log"
            continue
        fi
        timeout 120 $PYTHON -m pytest -p no:cacheprovider -q -rsfE -k graph \
            tests/gpu/test_gpu_dqn_learner.py > "$OUT/graphtest.log" 2>&1
        rc=$?
        echo "$rc" > "$OUT/graphtest.rc"
        graph_gate "$rc" "$OUT/graphtest.log"
        ;;
    graph)
        timeout 240 $PYTHON -m pytest -p no:cacheprovider -q -rsfE tests/gpu/test_gpu_dqn_learner.py \
            > "$OUT/graph-test.log" 2>&1
        graph_gate $? "$OUT/graph-test.log"
        if [[ " $GRAPH_MODES " == *-cl[-\ ]* ]]; then  # the layout's own tests, not gated on
            timeout 120 $PYTHON -m pytest -p no:cacheprovider -q -rsfE \
                tests/gpu/test_gpu_dqn_channels_last.py > "$OUT/channels-last-test.log" 2>&1
            note "  tests/gpu/test_gpu_dqn_channels_last.py (exit $?): $(tail -1 "$OUT/channels-last-test.log")"
        fi
        for mode in $GRAPH_MODES; do  # eager or graph, then -per and/or -cl
            flags=
            for part in $(echo "$mode" | tr '-' ' '); do
                case $part in
                eager) ;;
                graph) flags="$flags --cuda-graph" ;;
                per) flags="$flags --prioritized" ;;
                cl) flags="$flags --channels-last" ;;
                *) note "  learner mode $mode: unknown part $part (eager, graph, per, cl)"; continue 2 ;;
                esac
            done
            # shellcheck disable=SC2086  # $flags is a list of flags
            timeout 150 $PYTHON -m benchmarks.dqn_learner --batch-sizes "$GRAPH_BATCHES" \
                --seconds 5 $flags --pushers 48 \
                --json "$OUT/learner-$mode.json" > "$OUT/learner-$mode.log" 2>&1
            note "  the learner alone, $mode (exit $?):"
            grep -E '^batch' "$OUT/learner-$mode.log" | sed 's/^/    /' | tee -a "$SUMMARY"
        done
        ;;
    eval)
        timeout "$EVAL_S" $PYTHON -m examples.atari_dqn --no-progress --logdir "$OUT/default" \
            > "$OUT/default.log" 2>&1
        note "  README default run (exit $?):"
        grep -E '^batch' "$OUT/default.log" | sed 's/^/    /' | tee -a "$SUMMARY"
        eval_share "$OUT/default.log"
        timeout "$EVAL_S" $PYTHON -m examples.atari_dqn --no-progress --collectors 4 \
            --transport cuda --total-frames 60416 --trace --logdir "$OUT/four-cuda" \
            > "$OUT/four-cuda.log" 2>&1
        note "  4 collectors, cuda, 60,416 frames (exit $?):"
        grep -E '^GPUs:' "$OUT/four-cuda.log" | sed 's/^/    /' | tee -a "$SUMMARY"
        eval_share "$OUT/four-cuda.log"
        where_time_went "$OUT/four-cuda.log"
        ;;
    pong)
        if [ -n "$DEADLINE_S" ]; then  # fill the time left: the run's bound, less its end
            PONG_S=$(( DEADLINE_S - ($(date +%s) - T0) ))
            PONG_TRAIN_S=$(( PONG_S - PONG_END_S ))
            [ "$PONG_TRAIN_S" -gt 0 ] || { note "  no time left for Pong (${PONG_S} s)"; continue; }
        fi
        if [ -n "$PONG_PICK" ] && [[ "$PONG_EXTRA" != *--batch-size* ]]; then
            picked=$(grep -o '^pick: --batch-size [0-9]*' "$PONG_PICK" 2>/dev/null | awk '{print $NF}')
            if [ -n "$picked" ]; then
                PONG_EXTRA="$PONG_EXTRA --batch-size $picked"
                note "  batch $picked, as $PONG_PICK picked"
            else
                note "  no batch picked in $PONG_PICK: the recipe's batch"
            fi
        fi
        budget=; [ -n "$PONG_TRAIN_S" ] && budget="--train-seconds $PONG_TRAIN_S"
        # shellcheck disable=SC2086  # $budget and $PONG_EXTRA are lists of flags
        timeout "$PONG_S" $PYTHON -m examples.atari_dqn --env ALE/Pong-v5 \
            --collectors "$COLLECTORS" --transport "$PONG_TRANSPORT" --total-frames "$PONG_FRAMES" \
            --replay-capacity 1000000 --eval-every 500000 --eval-episodes 8 $budget \
            --no-progress --logdir "$OUT/pong" $PONG_EXTRA > "$OUT/pong.log" 2>&1
        note "  Pong recipe, $PONG_FRAMES frames $budget (exit $?; 124: cut at ${PONG_S} s):"
        grep -E '^(GPUs:|batch|emulator|eval at|final evaluation)' "$OUT/pong.log" | sed 's/^/    /' | tee -a "$SUMMARY"
        tail -3 "$OUT/pong/metrics.csv" 2>/dev/null | sed 's/^/    /' | tee -a "$SUMMARY"
        ;;
    tcp)
        ACTORRT_TP_TRANSPORTS=uv timeout "$TP_S" $PYTHON -m benchmarks.dqn_throughput \
            --collectors "$COLLECTORS" --transport cpu --frames 120000 --raw-seconds 10 \
            --json "$OUT/throughput-tcp.json" > "$OUT/throughput-tcp.log" 2>&1
        note "  transport cpu, TensorPipe uv only (exit $?):"
        grep -E '^(raw|DQN|ratio)' "$OUT/throughput-tcp.log" | sed 's/^/    /' | tee -a "$SUMMARY"
        ;;
    objects)
        timeout 180 $PYTHON -m benchmarks.objects_gpu --json "$OUT/objects-gpu.json" \
            > "$OUT/objects-gpu.log" 2>&1
        note "  objects on one GPU (exit $?): $(tail -1 "$OUT/objects-gpu.log")"
        ;;
    gputest)
        # shellcheck disable=SC2086  # GPUTEST_FILES is a list of paths
        timeout "$GPUTEST_S" $PYTHON -m pytest -p no:cacheprovider -q -rs $GPUTEST_FILES \
            > "$OUT/gputest.log" 2>&1
        note "  tests/gpu (exit $?): $(tail -1 "$OUT/gputest.log")"
        ;;
    *)
        note "  unknown step $step (machine, learner, graphtest, graph, objects, throughput, timeline, eval, pong, tcp, gputest)"
        ;;
    esac
done
note "== done $(date -u +%FT%TZ)"
if [ -n "${PACK:-}" ]; then
    # Packed beside, then moved: a PACK inside $OUT would otherwise be read as it grows.
    part=$(mktemp)
    tar -czf "$part" --exclude='checkpoint*.pt' --exclude='events.out.tfevents*' -C "$OUT" . \
        && mv "$part" "$PACK.tar.gz" && echo "packed: $PACK.tar.gz ($(du -h "$PACK.tar.gz" | cut -f1))"
fi
