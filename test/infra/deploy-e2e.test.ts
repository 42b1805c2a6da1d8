/**
 * End to end on LocalStack or a real AWS account (opt-in): `cdk deploy` the example app,
 * publish Nexmark bids with SigV4, read Q5's results from the sink stage's log group,
 * `cdk destroy`. Skipped unless one of:
 *
 *   LocalStack  AWS_ENDPOINT_URL points at a running LocalStack (its /_localstack/health
 *               answers); AWS_ENDPOINT_URL_S3=http://s3.localhost.localstack.cloud:4566
 *               for asset uploads; credentials and region default to test/us-east-1.
 *               Bootstraps, and uses a Function URL (HTTP API v2 is not in the free tier).
 *   AWS         SLUICE_E2E_AWS=1 with credentials for a bootstrapped account/region and
 *               no AWS_ENDPOINT_URL. Costs cents; everything is destroyed at the end.
 *
 * SLUICE_E2E_ENDPOINT=httpApi|functionUrl overrides the endpoint; SLUICE_E2E_KEEP=1
 * keeps the stack for inspection. After the results, the checkpoint commands run against
 * the deployed job (`--target aws`: listed, a savepoint taken, the job restored from it).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HeadBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { job } from '../../examples/nexmark/q5.ts';
import { keyToString } from '../../lib/api/types.ts';
import { ingestStreams } from '../../lib/aws/ingest/ingest-handler.ts';
import { compile } from '../../lib/graph/compile.ts';
import { keyGroupOfString, partitionOfKeyGroup } from '../../lib/graph/keygroups.ts';
const REPO_ROOT = new URL('../..', import.meta.url).pathname;
import { stackNameFor } from '../../infra/stack.ts';
import { type AwsCredentials, signRequest } from './support/sigv4.ts';
import { sluice } from '../cli/helpers.ts';

async function isLocalStack(endpoint: string): Promise<boolean> {
  try {
    const r = await fetch(new URL('/_localstack/health', endpoint), { signal: AbortSignal.timeout(2000) });
    return r.ok;
  } catch {
    return false;
  }
}

const ENDPOINT = process.env.AWS_ENDPOINT_URL;
const LOCALSTACK = ENDPOINT !== undefined && (await isLocalStack(ENDPOINT));
const REAL_AWS = ENDPOINT === undefined && process.env.SLUICE_E2E_AWS === '1';
const STACK = stackNameFor(job.name);
const KIND = (process.env.SLUICE_E2E_ENDPOINT ?? (LOCALSTACK ? 'functionUrl' : 'httpApi')) as 'httpApi' | 'functionUrl';
const env: NodeJS.ProcessEnv = LOCALSTACK ? { AWS_ACCESS_KEY_ID: 'test', AWS_SECRET_ACCESS_KEY: 'test', AWS_REGION: 'us-east-1', ...process.env } : { ...process.env };

function cdk(...args: string[]): void {
  const r = spawnSync('npx', ['cdk', ...args, '--no-notices', '-c', `sluice:endpoint=${KIND}`, '-c', 'sluice:removalPolicy=destroy'], { cwd: REPO_ROOT, env, stdio: ['ignore', 'inherit', 'inherit'], timeout: 1_500_000 });
  if (r.status !== 0) throw new Error(`npx cdk ${args[0]} failed with status ${r.status}`);
}

describe.skipIf(!LOCALSTACK && !REAL_AWS)(`deploy ${STACK} (${LOCALSTACK ? 'LocalStack' : 'AWS'}, ${KIND}), publish, read results`, () => {
  const outputsFile = join(mkdtempSync(join(tmpdir(), 'sluice-e2e-')), 'outputs.json');
  let outputs: Record<string, string> | undefined;
  let attempted = false;
  let credentials: AwsCredentials;
  let region: string;
  const s3 = new S3Client({ ...(LOCALSTACK ? { forcePathStyle: true } : {}) });
  const started = Date.now();

  beforeAll(async () => {
    credentials = await s3.config.credentials();
    region = env.AWS_REGION ?? (await s3.config.region());
    if (LOCALSTACK) cdk('bootstrap');
    attempted = true;
    cdk('deploy', STACK, '--require-approval', 'never', '--outputs-file', outputsFile);
    outputs = (JSON.parse(readFileSync(outputsFile, 'utf8')) as Record<string, Record<string, string>>)[STACK];
  }, 1_600_000);

  afterAll(async () => {
    if (!attempted || process.env.SLUICE_E2E_KEEP === '1') return;
    // removalPolicy destroy empties the versioned buckets itself (autoDeleteObjects): nothing is emptied by hand.
    cdk('destroy', STACK, '--force');
  }, 1_600_000);

  const service = () => (KIND === 'functionUrl' ? 'lambda' : 'execute-api');
  async function post(path: string, body: unknown, headers: Record<string, string> = {}, sign = true): Promise<Response> {
    const url = new URL(path, outputs!.EndpointUrl).href;
    const text = JSON.stringify(body);
    const base = { 'content-type': 'application/json', ...headers };
    const signed = sign ? signRequest({ method: 'POST', url, headers: base, body: text, service: service(), region, credentials }) : base;
    return fetch(url, { method: 'POST', headers: signed, body: text });
  }

  it('refuses unsigned requests (IAM auth; LocalStack does not enforce IAM by default)', async () => {
    if (LOCALSTACK) return;
    const r = await post('streams/events/events', [], {}, false);
    expect(r.status).toBe(403);
  });

  it('computes Q5 hot items from published bids and writes them to the result log group', async () => {
    const plan = compile(job.graph);
    const stream = ingestStreams(plan).get('events')!;
    const maxP = plan.job.maxParallelism;
    // One Idempotency-Key per source partition, so every partition's watermark advances.
    const keys: string[] = [];
    for (let i = 0; keys.length < stream.partitions; i++) {
      const key = `e2e-${started}-${i}`;
      if (partitionOfKeyGroup(keyGroupOfString(keyToString(key), maxP), stream.partitions, maxP) === keys.length) keys.push(key);
    }
    const base = Math.floor(started / 10_000) * 10_000;
    const bid = (auction: number, t: number) => ({ type: 'bid', auction, bidder: 7, price: 100, channel: 'e2e', url: 'https://example.com', dateTime: base + t, extra: '' });
    const first = await post('streams/events/events', [bid(1, 1000), bid(2, 1100), bid(1, 1200), bid(1, 1400)], { 'idempotency-key': keys[0] });
    expect(first.status, await first.clone().text()).toBe(202);
    expect(await first.json()).toMatchObject({ accepted: 4 });
    // A bid 99 s later moves the watermark (4 s behind) past every window of the first ones.
    for (const key of keys) expect((await post('streams/events/events', [bid(3, 100_000)], { 'idempotency-key': key })).status).toBe(202);

    // Sliding 10 s windows every 2 s: the 5 windows holding t = 1000..1400 each have auction 1 with 3 bids.
    const expected = [-8000, -6000, -4000, -2000, 0].map((s) => ({ auction: 1, num: 3, windowStart: base + s, windowEnd: base + s + 10_000 }));
    const found = new Map<string, unknown>();
    const logs = process.env.AWS_ENDPOINT_URL_CLOUDWATCH_LOGS ?? ENDPOINT ?? `https://logs.${region}.amazonaws.com`;
    const deadline = Date.now() + 300_000;
    while (Date.now() < deadline && found.size < expected.length) {
      await new Promise((r) => setTimeout(r, 5000));
      for (const group of outputs!.ResultLogGroups.split(',')) {
        let nextToken: string | undefined;
        do {
          const body = JSON.stringify({ logGroupName: group, startTime: started - 60_000, nextToken });
          const headers = signRequest({ method: 'POST', url: logs, headers: { 'content-type': 'application/x-amz-json-1.1', 'x-amz-target': 'Logs_20140328.FilterLogEvents' }, body, service: 'logs', region, credentials });
          const page = (await (await fetch(logs, { method: 'POST', headers, body })).json()) as { events?: { message: string }[]; nextToken?: string };
          for (const e of page.events ?? []) {
            for (const line of e.message.split('\n')) {
              if (!line.startsWith('{"auction"')) continue;
              const r = JSON.parse(line) as { windowStart: number };
              if (r.windowStart >= base - 8000 && r.windowStart <= base) found.set(line, r);
            }
          }
          nextToken = page.nextToken;
        } while (nextToken);
      }
    }
    // A stdout sink's duplicate filter is per container, so a redelivery may repeat a line: compare as a set.
    expect([...found.values()].sort((a, b) => (a as { windowStart: number }).windowStart - (b as { windowStart: number }).windowStart)).toEqual(expected);
  }, 600_000);

  it('lists checkpoints, takes a savepoint and restores the deployed job from it (--target aws)', async () => {
    const cli = (...args: string[]) => sluice([...args, 'examples/nexmark/q5.ts', '--target', 'aws'], { env, timeoutMs: 900_000 });
    const savepoint = await cli('savepoint', '--label', 'e2e', '--timeout', '600000');
    expect(savepoint.code, savepoint.stderr).toBe(0);
    expect(savepoint.stderr).toMatch(/savepoint "e2e" of job "nexmark-q5": epoch \d+/);
    const listed = await cli('checkpoints', '--json');
    expect(listed.code, listed.stderr).toBe(0);
    expect((JSON.parse(listed.stdout) as { savepoints: { label: string }[] }).savepoints.map((s) => s.label)).toContain('e2e');
    const restored = await cli('restore', '--from', 'e2e');
    expect(restored.code, restored.stderr).toBe(0);
    expect(restored.stderr).toMatch(/consumers and coordinator running again/);
  }, 1_800_000);

  it('destroys with objects in its buckets, then deploys the same job again under the same names', async () => {
    const buckets = [outputs!.SnapshotBucketName, outputs!.AccessLogBucketName].filter((b): b is string => b !== undefined);
    cdk('destroy', STACK, '--force');
    for (const bucket of buckets) await expect(s3.send(new HeadBucketCommand({ Bucket: bucket })), bucket).rejects.toThrow();
    cdk('deploy', STACK, '--require-approval', 'never', '--outputs-file', outputsFile);
    outputs = (JSON.parse(readFileSync(outputsFile, 'utf8')) as Record<string, Record<string, string>>)[STACK];
    const bid = { type: 'bid', auction: 1, bidder: 7, price: 100, channel: 'e2e', url: 'https://example.com', dateTime: Date.now(), extra: '' };
    const accepted = await post('streams/events/events', [bid]);
    expect(accepted.status, await accepted.text()).toBe(202);
  }, 3_200_000);
});
