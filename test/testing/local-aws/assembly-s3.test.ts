/**
 * `--target assembly` with a job of one's own (test/testing/local-aws/assembly-s3-job.ts) whose sink is
 * `AwsSinks.s3Files`: `sluice synth` bundles it, the bundles run against DynamoDB Local and
 * fauxqs behind the IAM-checking proxy, and the output is what the sink committed, which
 * takes one more checkpoint after the drain (the state machine's epoch run locally).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { Sinks, type Sink } from '../../../lib/api/sinks.ts';
import { AssemblyRun } from '../../../lib/testing/local-aws/assembly/run.ts';
import { localAwsAt } from '../../../lib/testing/local-aws/endpoints.ts';
import { EmbeddedRuntime } from '../../../lib/local/embedded.ts';
import { generateEvents, serializeEvent } from '../../../lib/nexmark/index.ts';
import job from './assembly-s3-job.ts';

const ROOT = resolve(import.meta.dirname, '../../..');
const dir = mkdtempSync(join(tmpdir(), 'sluice-assembly-s3-'));
const ASSEMBLY = join(dir, 'cdk.out');
const EVENTS = join(dir, 'events.jsonl');
writeFileSync(EVENTS, [...generateEvents(0, 1500, { ratePerSec: 100 })].map(serializeEvent).join('\n') + '\n');
const env = localAwsAt({ dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint'), s3: inject('fauxqsEndpoint') }, inject('awsRegion'), inject('awsCredentials'));

beforeAll(async () => {
  const t0 = performance.now();
  await promisify(execFile)('npx', ['tsx', 'lib/cli/main.ts', 'synth', 'test/testing/local-aws/assembly-s3-job.ts', '--output', ASSEMBLY, '--no-nag'], { cwd: ROOT, timeout: 150_000, maxBuffer: 64 << 20 });
  console.log(`sluice synth: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}, 160_000);

afterAll(async () => {
  await env.close();
  rmSync(dir, { recursive: true, force: true });
});

it('an S3 file sink: the committed files after a final checkpoint, as the embedded run wrote them', async () => {
  const embedded = Sinks.collect<unknown>();
  await new EmbeddedRuntime(job, { sources: { events: { kind: 'file', path: EVENTS } }, sinks: { files: embedded as Sink<any> } }).run();
  const out = Sinks.collect<unknown>();
  const logs: string[] = [];
  const t0 = performance.now();
  const run = new AssemblyRun({ assemblyDir: ASSEMBLY, job, source: 'events', inputPath: EVENTS, sink: 'files', output: out as Sink<any>, log: (l) => logs.push(l), env });
  await run.run();
  console.log(`assembly run: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  expect(run.deniedCalls).toEqual([]);
  expect(run.deadLetters).toEqual([]);
  const sorted = (r: readonly unknown[]) => r.map((x) => JSON.stringify(x)).sort();
  expect(embedded.records.length).toBeGreaterThan(1000);
  expect(sorted(out.records)).toEqual(sorted(embedded.records));
});
