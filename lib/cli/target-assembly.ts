/**
 * `sluice run --target assembly`: the job as `sluice synth` packages it for AWS, run
 * against local servers. The cloud assembly (`--assembly DIR`, or a fresh synth into a
 * temporary directory) supplies the exact Lambda bundles, their environment, event source
 * mappings, queues, table and bucket, and the roles whose policies every AWS call is
 * checked against (lib/testing/local-aws/assembly/). A denied call fails the run.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Sink } from '../api/sinks.ts';
import type { Job } from '../api/stream.ts';
import { AssemblyRun } from '../testing/local-aws/assembly/run.ts';
import { ConfigError } from '../errors.ts';
import type { RejectedInput } from '../transport/sources.ts';
import type { DeadLetter } from '../transport/envelope.ts';
import { synthesize } from './deploy.ts';
import { fmt } from './options.ts';

export interface AssemblyRunOptions {
  readonly job: Job;
  readonly jobPath: string;
  readonly params: readonly string[];
  readonly source: string;
  readonly sink: string;
  readonly input: string;
  readonly output: Sink<unknown>;
  readonly assembly?: string;
  readonly stackName?: string;
  /** The run has checkpoint flags (not supported on this target). */
  readonly checkpoints: boolean;
  readonly log: (line: string) => void;
}

/** What `sluice run` needs of a runtime: run(), then rejected inputs and dead letters. */
export interface AssemblyTargetRun {
  run(): Promise<{ sourceRecords: number }>;
  readonly rejectedInputs: readonly RejectedInput[];
  readonly deadLetters: readonly DeadLetter[];
  printSummary(): void;
}

export async function assemblyRun(o: AssemblyRunOptions): Promise<AssemblyTargetRun> {
  if (o.checkpoints) throw new ConfigError('--target assembly', 'a run without checkpoint flags (the deployed state machine checkpoints on its own schedule)', 'checkpoint flags');
  let dir = o.assembly;
  let temporary: string | undefined;
  if (dir === undefined) {
    temporary = mkdtempSync(join(tmpdir(), 'sluice-assembly-'));
    o.log(`assembly: synthesizing ${o.jobPath} into ${temporary} (pass --assembly to reuse one)`);
    // The run checks the bundles and the IAM policies; cdk-nag and schema validation add nothing to that.
    const s = await synthesize(o.jobPath, { output: temporary, stackName: o.stackName, param: o.params, nag: false, validate: false }, o.log);
    dir = s.outdir;
  }
  const runner = new AssemblyRun({ assemblyDir: dir, stackName: o.stackName, job: o.job, source: o.source, inputPath: o.input, sink: o.sink, output: o.output, log: o.log });
  return {
    async run() {
      try {
        return await runner.run();
      } finally {
        if (temporary) rmSync(temporary, { recursive: true, force: true });
      }
    },
    get rejectedInputs() {
      return runner.rejectedInputs;
    },
    get deadLetters() {
      return runner.deadLetters;
    },
    printSummary() {
      o.log(`assembly: ${fmt.int(runner.deniedCalls.length)} denied AWS calls`);
    },
  };
}
