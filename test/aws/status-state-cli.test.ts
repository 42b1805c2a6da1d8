/**
 * `sluice status` and `sluice state get` with --target local-aws, as a user runs them, in
 * child processes against the test setup's DynamoDB Local and fauxqs (through the SDK's
 * endpoint variables): after a checkpointed local-AWS run, status shows every stage with
 * empty queues, no dead letters and the run's final checkpoint, and advises partitions from
 * the loads the run recorded (the advice at a far rate names the rescale); state get reads a key's
 * state from that checkpoint's snapshots, equal to the sums of the input; a key without
 * state, an unknown operator and a directory without a run fail with exit 1 and say what
 * was expected.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { ROOT, sluice } from '../cli/helpers.ts';
import { eventsFile } from './checkpoint-jobs.ts';

const EVENTS = 3_000;
const dir = mkdtempSync(join(tmpdir(), 'sluice-status-state-'));
const ck = join(dir, 'ck');
let job: string;
let input: string;

function childEnv(): NodeJS.ProcessEnv {
  const creds = inject('awsCredentials');
  const env: NodeJS.ProcessEnv = { ...process.env, AWS_REGION: inject('awsRegion'), AWS_ACCESS_KEY_ID: creds.accessKeyId, AWS_SECRET_ACCESS_KEY: creds.secretAccessKey };
  for (const k of Object.keys(env)) if (k.startsWith('AWS_ENDPOINT_URL')) delete env[k];
  return Object.assign(env, { AWS_ENDPOINT_URL_DYNAMODB: inject('dynamodbEndpoint'), AWS_ENDPOINT_URL_SQS: inject('fauxqsEndpoint'), AWS_ENDPOINT_URL_S3: inject('fauxqsEndpoint') });
}
const run = (args: string[]) => sluice(args, { env: childEnv(), timeoutMs: 150_000 });

beforeAll(async () => {
  writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
  job = join(dir, 'counts.ts');
  writeFileSync(job, `import { countsJob } from '${ROOT}test/aws/checkpoint-jobs.ts';\nexport default () => countsJob();\n`);
  input = eventsFile(dir, 'events.jsonl', EVENTS);
  const r = await run(['run', job, '--input', input, '--output', join(dir, 'out.jsonl'), '--target', 'local-aws', '--checkpoint-interval', '50', '--checkpoint-dir', ck]);
  expect(r.code, r.stderr).toBe(0);
}, 180_000);

describe('sluice status / state get --target local-aws', () => {
  it('status names each stage, its queues and the last checkpoint', async () => {
    const r = await run(['status', job, '--target', 'local-aws', '--checkpoint-dir', ck, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const s = JSON.parse(r.stdout);
    expect(s).toMatchObject({ target: 'local-aws', job: 'counts', deadLetterMessages: 0, pendingSavepoint: null, coordinator: null });
    expect(s.stages.length).toBeGreaterThanOrEqual(2);
    for (const st of s.stages) expect(st).toMatchObject({ queuedMessages: 0, inFlightMessages: 0, deadLetterMessages: 0, partitions: expect.any(Number) });
    expect(s.lastCheckpoint.epoch).toBeGreaterThan(0);
    expect(s.retainedCheckpoints).toBeGreaterThan(0);
    expect(r.stderr).toContain(`last checkpoint: epoch ${s.lastCheckpoint.epoch}`);
  }, 120_000);

  it('status advises partitions from the loads the run recorded in its checkpoint directory', async () => {
    const r = await run(['status', job, '--target', 'local-aws', '--checkpoint-dir', ck, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const { scaling } = JSON.parse(r.stdout);
    expect(scaling.sourceRate).toBeGreaterThan(0);
    expect(scaling.targetRate).toBe(scaling.sourceRate);
    expect(scaling.spanMs).toBeGreaterThan(0);
    // countsJob: the ingest stage, then the keyed process function; each took in every event.
    expect(scaling.stages.map((a: { fedBySources: boolean }) => a.fedBySources)).toEqual([true, false]);
    for (const a of scaling.stages) {
      expect(a.recordsIn).toBeGreaterThanOrEqual(EVENTS);
      expect(a.busyMs).toBeGreaterThan(0);
      expect(a.truePerPartition).toBeCloseTo(a.recordsIn / (a.busyMs / 1000), 6);
      expect(a.advisedPartitions).toBeGreaterThanOrEqual(1);
    }
    expect(r.stderr).toMatch(/scaling at [\d,]+ source records\/s \(what arrived over the run's .*, until it stopped/);

    // At a rate no partition takes: the keyed stage needs every key group; the advice says how to get there.
    const far = await run(['status', job, '--target', 'local-aws', '--checkpoint-dir', ck, '--target-rate', '100000000', '--json']);
    expect(far.code, far.stderr).toBe(0);
    const keyed = JSON.parse(far.stdout).scaling.stages[1];
    expect(keyed).toMatchObject({ partitions: 2, advisedPartitions: 8, rescalable: true });
    expect(far.stderr).toContain(`sluice rescale ${job} --stage 1 --partitions 8 --target local-aws --checkpoint-dir ${ck}`);

    const bad = await run(['status', job, '--target', 'local-aws', '--checkpoint-dir', ck, '--apply']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('--apply');
  }, 120_000);

  it("state get reads a key's state from the run's last checkpoint", async () => {
    const events = readFileSync(input, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as { user: string; amount: number });
    const total = events.filter((e) => e.user === 'u7').reduce((n, e) => n + e.amount, 0);
    const r = await run(['state', 'get', job, 'per-user', 'u7', '--target', 'local-aws', '--checkpoint-dir', ck, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const got = JSON.parse(r.stdout);
    expect(got).toMatchObject({ job: 'counts', operator: 'per-user', key: 'u7', from: expect.stringMatching(/^checkpoint \d+$/) });
    // Every event is in the final checkpoint: the total is the input's, every second's sum fired and cleared.
    expect(got.state.total).toBe(total);
    expect(got.state.perSecond ?? {}).toEqual({});
    expect(r.stderr).toContain(`operator "per-user", key "u7", in ${got.from}`);
  }, 120_000);

  it('bad input: a key without state, an unknown operator, a directory without a run', async () => {
    const noKey = await run(['state', 'get', job, 'per-user', 'nobody', '--target', 'local-aws', '--checkpoint-dir', ck]);
    expect(noKey.code).toBe(1);
    expect(noKey.stderr).toMatch(/<key>.*a key operator "per-user" has state for .* \(50 keys, e\.g\./s);
    const noOp = await run(['state', 'get', job, 'nope', 'u7', '--target', 'local-aws', '--checkpoint-dir', ck]);
    expect(noOp.code).toBe(1);
    expect(noOp.stderr).toContain('"per-user"');
    const noRun = await run(['status', job, '--target', 'local-aws', '--checkpoint-dir', join(dir, 'empty')]);
    expect(noRun.code).toBe(1);
    expect(noRun.stderr).toContain('no local-aws.json');
  }, 120_000);
});
