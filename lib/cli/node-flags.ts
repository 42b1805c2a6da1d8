/**
 * The V8 flags of the processes Sluice starts itself: the `sluice` command (bin/sluice.js's
 * shebang), `npm start` (package.json) and the benchmark's workers (bench/run.ts). A test
 * checks the launchers carry each of them.
 *
 * `--no-parallel-scavenge`: a young-generation collection on one thread. The embedded runtime
 * is one thread that keeps window state alive across collections, so its scavenges copy a
 * few MB each; on two threads a scavenge pauses the runtime for less time but costs 45-90 %
 * more CPU in all (Nexmark Q8, `--trace-gc-nvp`: 9.6 ms on the main thread plus 15 ms
 * on a helper, against 13-17 ms on one), and a Lambda function of up to 1 769 MB has one vCPU
 * or less to run the helper on. BENCHMARKS.md has the measurements. (Lambda's NODE_OPTIONS
 * does not accept this flag, so the functions run with Node's defaults.)
 */
export const NODE_FLAGS: readonly string[] = ['--no-parallel-scavenge'];
