#!/usr/bin/env bash
# run.sh runs the bench module's benchmarks in interleaved rounds and prints
# the benchstat tables, the ratios to the bare column and PASS/MISS for each
# target of the performance issue. See README.md.
#
#   bench/run.sh          full run: 10 rounds, 300ms per benchmark (~13 min on 2 cores)
#   bench/run.sh -quick   CI smoke: 2 rounds, 10ms per benchmark (< 2 min)
#   bench/run.sh -report results/FILE.txt   tables and targets of an earlier run
#
# Environment (each overrides the mode's default):
#   ROUNDS     rounds; each runs every benchmark once, mechanisms shuffled
#   BENCHTIME  -test.benchtime of the timed benchmarks
#   BENCH      -test.bench regexp of the timed benchmarks
#   WAITING    rounds of the memory benchmark (BenchmarkWaiting); 0: none
#   OUT        results file (appended to; default results/latest.txt)
set -euo pipefail
cd "$(dirname "$0")"

mode=full
case "${1:-}" in
-quick | --quick) mode=quick ;;
-report | --report)
	[ $# -eq 2 ] || { echo "usage: run.sh -report RESULTS" >&2; exit 2; }
	mode=report OUT=$2
	;;
"") ;;
*)
	sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
	;;
esac

# measure runs the rounds, appending to $OUT.
measure() {
	if [ "$mode" = quick ]; then
		ROUNDS=${ROUNDS:-2} BENCHTIME=${BENCHTIME:-10ms} WAITING=${WAITING:-1}
	else
		ROUNDS=${ROUNDS:-10} BENCHTIME=${BENCHTIME:-300ms} WAITING=${WAITING:-$ROUNDS}
	fi
	BENCH=${BENCH:-'^Benchmark(Paired)?(Unary|UnaryRetry|UnaryParallel|ServerStream|ClientStream|BidiStream)$|^BenchmarkPaired(UnaryHedged|Facts)$|^BenchmarkIsolated(Retry|Parallel|Hedged)?$'}
	OUT=${OUT:-results/latest.txt}
	mkdir -p "$(dirname "$OUT")"
	: >"$OUT"

	echo "== machine"
	go version
	echo "nproc: $(nproc)"
	lscpu 2>/dev/null | grep -E '^(Model name|CPU family|Model|Hypervisor vendor|L3 cache):' | tr -s ' ' | paste -sd';' || true
	grep -m1 'cpu MHz' /proc/cpuinfo || true
	echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
	changes=$(git -C .. status --porcelain -- . ':!bench' 2>/dev/null | awk '{print $2}' | tr '\n' ' ')
	echo "grpcbackoff: commit $(git -C .. rev-parse --short HEAD 2>/dev/null || echo '?')${changes:+, uncommitted changes (diff $(git -C .. diff HEAD -- . ':!bench' | sha256sum | cut -c1-12)) in: $changes}"
	[ -n "$changes" ] && git -C .. diff HEAD -- . ':!bench' >"${OUT%.txt}.lib.diff"
	echo "mode: $mode, rounds: $ROUNDS, benchtime: $BENCHTIME, memory rounds: $WAITING, results: bench/$OUT"

	echo
	echo "== build"
	bin=$(mktemp -d)/bench.test
	trap 'rm -rf "$(dirname "$bin")"' EXIT
	go test -c -o "$bin" .
	go build -o /dev/null ./cmd/ratios

	echo
	echo "== rounds"
	start=$SECONDS
	for round in $(seq 1 "$ROUNDS"); do
		printf 'round %d/%d: timed' "$round" "$ROUNDS"
		BENCH_SEED=$round "$bin" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$BENCHTIME" \
			-test.count 1 -test.benchmem >>"$OUT"
		if [[ "$BENCH" == *IsolatedParallel* || "$BENCH" == *'Isolated(Retry|Parallel|Hedged)?$'* ]]; then
			# The parallel case at one core too: cmd/ratios compares the two.
			"$bin" -test.run '^$' -test.bench '^BenchmarkIsolatedParallel$' -test.benchtime "$BENCHTIME" \
				-test.cpu 1 -test.count 1 -test.benchmem >>"$OUT"
		fi
		if [ "$round" -le "$WAITING" ]; then
			printf ', memory'
			"$bin" -test.run '^$' -test.bench '^BenchmarkWaiting$' -test.benchtime 1x -test.count 1 >>"$OUT"
		fi
		printf ' (%ds so far)\n' $((SECONDS - start))
	done
	if grep -q '^--- FAIL' "$OUT"; then
		grep -A5 '^--- FAIL' "$OUT" >&2
		exit 1
	fi
}

if [ "$mode" != report ]; then
	measure
fi

stat() { # title, benchstat arguments...
	echo
	echo "== $1"
	shift
	go tool benchstat "$@" "$OUT" | sed '/^goos:\|^goarch:\|^pkg:\|^cpu:/d'
}
peers='/mech@(bare ours grpcretry middleware gax)'
variants='/mech@(bare ours ours+hook ours+noop ours+sdk ours+all ours-pushback)'
stat "over bufconn, measured in pairs with bare (x-bare: median time over bare's)" \
	-col '/mech@(bare ours ours+hook ours+noop ours+sdk ours+all ours-pushback grpcretry middleware gax)' \
	-filter '.name:/^Paired/ -.name:PairedUnaryHedged .unit:x-bare'
stat "hedged UnaryCall (MaxAttempts 2, Delay 1 s, server answers at once), paired with bare" \
	-col '/mech@(bare ours ours+hedge)' -filter '.name:(PairedUnaryHedged OR IsolatedHedged)'
if grep -q '^BenchmarkPairedFacts' "$OUT"; then
	stat "how an attempt tells commit and sent, no retry layer: call options or a stats handler, paired with bare" \
		-col '/signal@(none options options-trailer statshandler)' -filter '.name:PairedFacts'
fi
stat "unary over bufconn: ours beside the peers" -col "$peers" -filter '.name:(Unary OR UnaryRetry OR UnaryParallel)'
stat "unary over bufconn: ours with hook and metrics" -col "$variants" -filter '.name:(Unary OR UnaryRetry OR UnaryParallel)'
stat "streams over bufconn (one op = one stream of msgs messages)" -col '/mech@(bare ours ours+all grpcretry middleware gax)' \
	-filter '.name:(ServerStream OR ClientStream OR BidiStream)'
stat "isolated (fake invoker, no transport): beside the peers" -col '/mech@(bare ours middleware gax)' \
	-filter '.name:(Isolated OR IsolatedRetry OR IsolatedParallel)'
stat "isolated: ours with hook and metrics" -col "$variants" -filter '.name:(Isolated OR IsolatedRetry OR IsolatedParallel)'
if grep -q '^BenchmarkWaiting' "$OUT"; then
	stat "memory held while waiting in backoff (B/wait: heap; stack-B/wait: goroutine stack)" -col '/mech@(ours grpcretry middleware gax)' \
		-filter '.name:Waiting .unit:(B/wait OR stack-B/wait)'
fi

echo
echo "== ratios and targets"
go run ./cmd/ratios "$OUT" || true
