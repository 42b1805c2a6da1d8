/**
 * `sluice savepoint|checkpoints|restore --target local-aws` end to end, as a user runs
 * them, in child processes against the test setup's DynamoDB Local and fauxqs (through
 * the SDK's endpoint variables): after a checkpointed local-AWS run, `sluice savepoint`
 * records its request and waits; the resumed run takes it (a full, labelled epoch) and
 * keeps the run's output; the savepoint and the checkpoints are listed; `sluice restore`
 * checks the savepoint against the job as it is now, names each problem of an
 * incompatible change, and restores it in place; `--resume` continues from it. (A restore
 * with logged input to replay and a changed plan are in savepoints.test.ts.)
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { Sinks, type Sink } from '../../lib/api/sinks.ts';
import { DynamoDbPointerStore } from '../../lib/aws/dynamodb/dynamodb-pointers.ts';
import { localAwsControl, readLocalAwsIdentity } from '../../lib/testing/local-aws/checkpointing.ts';
import { readSavepointRequest } from '../../lib/aws/restore/savepoints.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { ROOT, sluice } from '../cli/helpers.ts';
import { countsJob, eventsFile } from './checkpoint-jobs.ts';
import { localClients } from './helpers.ts';

const EVENTS = 8_000;
const dir = mkdtempSync(join(tmpdir(), 'sluice-savepoint-cli-'));
let job: string;
let input: string;
let expected: string[];

function childEnv(withEndpoints = true): NodeJS.ProcessEnv {
  const creds = inject('awsCredentials');
  // SLUICE_DEBUG: the runner's handler and delete errors go to stderr, which a timeout prints.
  const env: NodeJS.ProcessEnv = { ...process.env, SLUICE_DEBUG: '1', AWS_REGION: inject('awsRegion'), AWS_ACCESS_KEY_ID: creds.accessKeyId, AWS_SECRET_ACCESS_KEY: creds.secretAccessKey };
  for (const k of Object.keys(env)) if (k.startsWith('AWS_ENDPOINT_URL')) delete env[k];
  if (withEndpoints) Object.assign(env, { AWS_ENDPOINT_URL_DYNAMODB: inject('dynamodbEndpoint'), AWS_ENDPOINT_URL_SQS: inject('fauxqsEndpoint'), AWS_ENDPOINT_URL_S3: inject('fauxqsEndpoint') });
  return env;
}

const run = (args: string[], env = childEnv()) => sluice(args, { env, timeoutMs: 150_000 });
const lines = (f: string) => readFileSync(f, 'utf8').split('\n').filter(Boolean).sort();

beforeAll(async () => {
  writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
  job = join(dir, 'counts.ts');
  writeFileSync(job, `import { countsJob } from '${ROOT}test/aws/checkpoint-jobs.ts';\nexport default (p) => countsJob({ parallelism: p.parallelism, renamedState: p.renamed === true });\n`);
  input = eventsFile(dir, 'events.jsonl', EVENTS);
  const ref = Sinks.collect<unknown>();
  await new EmbeddedRuntime(countsJob(), { sources: { events: { kind: 'file', path: input } }, sinks: { out: ref as Sink<any> } }).run();
  expected = ref.records.map((r) => JSON.stringify(r)).sort();
});

describe('sluice savepoint / checkpoints / restore --target local-aws', () => {
  it('a savepoint requested while the run is stopped is taken when it resumes, then listed, checked against changed jobs and restored', async () => {
    const out = join(dir, 'out.jsonl');
    const ck = join(dir, 'ck');
    const args = ['run', job, '--input', input, '--output', out, '--target', 'local-aws', '--checkpoint-interval', '50', '--checkpoint-dir', ck];
    const first = await run(args);
    expect(first.code, first.stderr).toBe(0);
    expect(lines(out)).toEqual(expected);

    // The request is recorded durably (the control table outlives the run); the command waits for it.
    const savepoint = run(['savepoint', job, '--target', 'local-aws', '--checkpoint-dir', ck, '--label', 'before-change', '--timeout', '120000', '--json']);
    const id = readLocalAwsIdentity(ck)!;
    const clients = localClients();
    const pointers = new DynamoDbPointerStore({ client: clients.dynamodb, tableName: localAwsControl(id.runId, 'counts').table, job: 'counts' });
    for (let i = 0; (await readSavepointRequest(pointers))?.status !== 'pending'; i++) {
      expect(i, 'the request item appears').toBeLessThan(600);
      await new Promise((r) => setTimeout(r, 100));
    }
    const resumed = await run([...args, '--resume']);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(lines(out)).toEqual(expected);
    const sp = await savepoint;
    expect(sp.code, sp.stderr).toBe(0);
    expect(sp.stderr).toMatch(/no local-aws run is running/);
    expect(sp.stderr).toMatch(/savepoint "before-change" of job "counts": epoch \d+, [\d,]+ bytes in \d+ objects/);
    // The restore hint and --json carry the flags that found it.
    const hint = `sluice restore ${job} --target local-aws --checkpoint-dir ${ck} --from before-change`;
    expect(sp.stderr).toContain(`restore: ${hint}\n`);
    expect(JSON.parse(sp.stdout)).toMatchObject({ target: 'local-aws', job: 'counts', label: 'before-change', epoch: expect.any(Number), bytes: expect.any(Number), restore: hint });
    expect((await readSavepointRequest(pointers))?.status).toBe('written');
    // Its location is an s3:// URI the embedded runtime restores from too (every event consumed: nothing left to feed).
    const location = (JSON.parse(sp.stdout) as { location: string }).location;
    expect(location).toMatch(/^s3:\/\/[^/]+\/counts\/savepoints\/before-change\/$/);
    const none = join(dir, 'none.jsonl');
    writeFileSync(none, '');
    const embedded = await run(['restore', job, '--from', location, '--input', none, '--output', join(dir, 'embedded-out.jsonl'), '--checkpoint-dir', join(dir, 'embedded-ck'), '--json']);
    expect(embedded.code, embedded.stderr).toBe(0);
    expect(embedded.stderr).toMatch(/restored checkpoint \d+ from .*--from s3:\/\//);
    Object.values(clients).forEach((c) => c.destroy());

    const listed = await run(['checkpoints', job, '--target', 'local-aws', '--checkpoint-dir', ck, '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    const l = JSON.parse(listed.stdout) as { checkpoints: { epoch: number; latest: boolean }[]; savepoints: { label: string; epoch: number; states: unknown[] }[]; pending: unknown };
    expect(l.savepoints.map((s) => s.label)).toEqual(['before-change']);
    expect(l.savepoints[0].states).toEqual([{ operator: 'per-user', kind: 'keyedProcess', states: [['perSecond', 'map'], ['total', 'value']] }]);
    expect(l.checkpoints.filter((c) => c.latest)).toHaveLength(1);
    expect(l.pending).toBeNull();
    const text = await run(['checkpoints', job, '--target', 'local-aws', '--checkpoint-dir', ck]);
    expect(text.stdout).toMatch(/savepoints\n\s+before-change\s+epoch \d+/);
    expect(text.stdout).toMatch(/latest/);

    // A change the savepoint does not fit: every problem named, nothing restored.
    const bad = await run(['restore', job, '--target', 'local-aws', '--checkpoint-dir', ck, '--from', 'before-change', '--param', 'renamed=true']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/savepoint "before-change" does not fit this job's state \(1 problem\)/);
    expect(bad.stderr).toMatch(/operator "per-user": state "total" \(value\) is no longer declared/);
    // The state fits a job with 3 partitions everywhere, but its source partitions changed: the
    // input logged after the savepoint could not be replayed into them, so the restore refuses.
    const changed = await run(['restore', job, '--target', 'local-aws', '--checkpoint-dir', ck, '--from', 'before-change', '--param', 'parallelism=3']);
    expect(changed.code).toBe(1);
    expect(changed.stderr).toMatch(/savepoint "before-change" \(epoch \d+\) fits job "counts" after its change/);
    expect(changed.stderr).toMatch(/expected a changed job whose sources keep their partitions \(\[events#0, events#1\]\), received source partitions \[events#0, events#1, events#2\]/);

    // The same job: rolled back in place to the savepoint; --resume continues from it with the same committed output.
    const restored = await run(['restore', job, '--target', 'local-aws', '--checkpoint-dir', ck, '--from', 'before-change', '--json']);
    expect(restored.code, restored.stderr).toBe(0);
    expect(JSON.parse(restored.stdout)).toEqual({ target: 'local-aws', job: 'counts', restored: 'savepoint "before-change"', epoch: expect.any(Number), restoreEpoch: expect.any(Number), plan: 'same' });
    expect(restored.stderr).toMatch(/restored savepoint "before-change": restore epoch \d+; continue with: sluice run/);
    const after = await run([...args, '--resume']);
    expect(after.code, after.stderr).toBe(0);
    expect(after.stderr).toMatch(/restored checkpoint \d+ from .* in place/);
    expect(lines(out)).toEqual(expected);
    const unknown = await run(['restore', job, '--target', 'local-aws', '--checkpoint-dir', ck, '--from', 'nope']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/--from: expected a retained checkpoint's epoch or a savepoint label of job "counts".*"nope"/);
  }, 400_000);

  it('says which endpoint variable is missing, and which directory has no local-aws run', async () => {
    const noEnv = await run(['checkpoints', job, '--target', 'local-aws', '--checkpoint-dir', join(dir, 'ck')], childEnv(false));
    expect(noEnv.code).toBe(1);
    expect(noEnv.stderr).toMatch(/AWS_ENDPOINT_URL_DYNAMODB: expected the endpoint of the servers the local-aws run used/);
    const noRun = await run(['savepoint', job, '--target', 'local-aws', '--checkpoint-dir', join(dir, 'none')]);
    expect(noRun.code).toBe(1);
    expect(noRun.stderr).toMatch(/--checkpoint-dir: expected the directory of a `sluice run --target local-aws --checkpoint-interval`/);
  }, 60_000);
});
