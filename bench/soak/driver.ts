/**
 * Runs a range of crash-soak seeds (bench/soak/seed.ts), a few child processes at a
 * time, and sums what happened: seeds passed and failed, kills by kind, records checked
 * and the checker's four counts. Each failure is printed with its reproducing command.
 */
import { statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { LOCAL_CREDENTIALS, LOCAL_REGION, type LocalServer, startDynamoDbLocal, startFauxqs } from '../../lib/testing/local-aws/servers.ts';
import { killKind, runSeed, type SeedResult } from './seed.ts';
import { runDevSeed } from './dev.ts';
import type { SoakMode } from './plan.ts';

export interface SoakOptions {
  readonly from: number;
  readonly seeds: number;
  readonly target: SoakMode;
  /** Child processes at a time. */
  readonly jobs: number;
  readonly dir: string;
  readonly keep?: boolean;
  /** Events per input of `sluice run` seeds (default: the target's, INPUTS). */
  readonly events?: number;
  /** Print a line per seed (default: every 50th and each failure). */
  readonly verbose?: boolean;
  /** Tests: see SoakEnv.beforeCheck. */
  readonly beforeCheck?: (output: string) => void;
}

export interface SoakSummary {
  readonly target: SoakMode;
  readonly runs: number;
  readonly passed: number;
  readonly failed: number;
  /** Child processes started (attempts), over all seeds. */
  readonly processes: number;
  readonly kills: ReadonlyMap<string, number>;
  readonly records: number;
  readonly lost: number;
  readonly duplicated: number;
  readonly unexpected: number;
  readonly reordered: number;
  readonly failures: readonly SeedResult[];
  readonly durationMs: number;
}

/**
 * Where a soak's scratch directory goes: a memory file system (/dev/shm) when there is
 * one, else the temporary directory. A SIGKILL loses nothing the page cache holds, so on
 * disk the children's fsyncs would add only waiting.
 */
export function scratchRoot(): string {
  try {
    if (statSync('/dev/shm').isDirectory()) return '/dev/shm';
  } catch {
    // no /dev/shm here
  }
  return tmpdir();
}

/** The SDK's variables for servers started here (fauxqs serves SQS and S3). */
async function localAwsServers(): Promise<{ env: NodeJS.ProcessEnv; stop: () => Promise<void> }> {
  const servers: LocalServer[] = await Promise.all([startDynamoDbLocal(), startFauxqs()]);
  const [ddb, fq] = servers;
  return {
    env: {
      AWS_ENDPOINT_URL_DYNAMODB: ddb.endpoint,
      AWS_ENDPOINT_URL_SQS: fq.endpoint,
      AWS_ENDPOINT_URL_S3: fq.endpoint,
      AWS_REGION: LOCAL_REGION,
      AWS_ACCESS_KEY_ID: LOCAL_CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: LOCAL_CREDENTIALS.secretAccessKey,
    },
    stop: async () => {
      await Promise.allSettled(servers.map((s) => s.stop()));
    },
  };
}

export async function runSoak(options: SoakOptions, log: (line: string) => void): Promise<SoakSummary> {
  const t0 = performance.now();
  const aws = options.target === 'local-aws' ? await localAwsServers() : undefined;
  const results: SeedResult[] = [];
  try {
    let next = options.from;
    const end = options.from + options.seeds;
    const worker = async () => {
      while (next < end) {
        const seed = next++;
        const r = options.target === 'dev' ? await runDevSeed(seed, options.dir, options.keep) : await runSeed(seed, options.target, { dir: options.dir, awsEnv: aws?.env, keep: options.keep, events: options.events, beforeCheck: options.beforeCheck });
        results.push(r);
        if (!r.ok) {
          log(`FAIL seed ${seed} (${r.plan.query}, ${options.target}, ${r.killed.length} kill(s)): ${r.error}`);
          log(`  reproduce: ${r.repro}`);
        } else if (options.verbose || results.length % 50 === 0) {
          log(`${results.length}/${options.seeds} seeds, ${results.filter((x) => !x.ok).length} failed (seed ${seed}: ${r.plan.query}, ${r.killed.length} kill(s), ${r.records} records, ${Math.round(r.durationMs)} ms)`);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, options.jobs) }, worker));
  } finally {
    await aws?.stop();
  }
  return summarize(options.target, results, performance.now() - t0);
}

export function summarize(target: SoakMode, results: readonly SeedResult[], durationMs: number): SoakSummary {
  const kills = new Map<string, number>();
  let records = 0;
  const sums = { lost: 0, duplicated: 0, unexpected: 0, reordered: 0 };
  for (const r of results) {
    for (const k of r.killed) kills.set(killKind(k), (kills.get(killKind(k)) ?? 0) + 1);
    const c = r.comparison?.counts;
    if (!c) continue;
    records += c.actual;
    sums.lost += c.lost;
    sums.duplicated += c.extraCopies;
    sums.unexpected += c.unexpected;
    sums.reordered += c.reordered;
  }
  const failures = results.filter((r) => !r.ok);
  return {
    target,
    runs: results.length,
    passed: results.length - failures.length,
    failed: failures.length,
    processes: results.reduce((n, r) => n + r.attempts, 0),
    kills,
    records,
    ...sums,
    failures,
    durationMs,
  };
}
