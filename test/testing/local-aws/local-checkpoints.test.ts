/**
 * Checkpoints in local-AWS mode, end to end: the real operator handlers on DynamoDB Local
 * and fauxqs snapshot to S3 and ack through DynamoDB, the Step Functions task code runs
 * the epochs in process, and the output file commits per epoch. A checkpointed run gives
 * the uninterrupted (embedded) run's output, and its later snapshots are incremental.
 * Crashes and restores are in local-checkpoints-crash.test.ts.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { Sinks, type Sink } from '../../../lib/api/sinks.ts';
import { barrierBody } from '../../../lib/aws/checkpoint/checkpoint-barriers.ts';
import { DynamoDbPointerStore } from '../../../lib/aws/dynamodb/dynamodb-pointers.ts';
import { decodeBody, sourceEnvelope } from '../../../lib/aws/sqs/sqs-codec.ts';
import { MessageDecodeError } from '../../../lib/aws/transport-errors.ts';
import { compile } from '../../../lib/graph/compile.ts';
import { localAwsAt } from '../../../lib/testing/local-aws/endpoints.ts';
import { LocalAwsRuntime } from '../../../lib/testing/local-aws/runner.ts';
import { fromBytes } from '../../../lib/checkpoint/codec.ts';
import { POINTER_NAME } from '../../../lib/checkpoint/driver.ts';
import type { CommitPointer, Manifest } from '../../../lib/checkpoint/protocol.ts';
import { CommittedFileSink } from '../../../lib/local/committed-sink.ts';
import { EmbeddedRuntime } from '../../../lib/local/embedded.ts';
import { countsJob, eventsFile } from '../../aws/checkpoint-jobs.ts';

const env = localAwsAt({ dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint'), s3: inject('fauxqsEndpoint') }, inject('awsRegion'), inject('awsCredentials'));
afterAll(() => env.close());

const dir = mkdtempSync(join(tmpdir(), 'sluice-local-ck-'));
const sortedLines = (text: string) => text.split('\n').filter(Boolean).sort();

describe('barrier messages on the source queues', () => {
  it('decode into barrier envelopes; a malformed barrier is a clear decode error', () => {
    const plan = compile(countsJob().graph);
    const body = decodeBody(barrierBody('events', { epoch: 3, baseEpoch: 2, full: ['1/0'], savepoint: false }));
    expect(body.k).toBe('i');
    const env = sourceEnvelope(plan, 0, 1, body as Extract<typeof body, { k: 'i' }>, '00000000000000000042', 'm1');
    expect(env).toMatchObject({ channel: '0:1', offset: '42', records: [], barrier: { epoch: 3, baseEpoch: 2, full: ['1/0'], savepoint: false } });
    const bad = decodeBody('{"v":1,"k":"i","s":"events","r":[],"b":{"epoch":0}}') as Extract<typeof body, { k: 'i' }>;
    expect(() => sourceEnvelope(plan, 0, 1, bad, '43', 'm2')).toThrow(MessageDecodeError);
    expect(() => sourceEnvelope(plan, 0, 1, bad, '43', 'm2')).toThrow(/barrier "b": expected \{epoch >= 1/);
  });
});

describe('local-AWS mode with checkpoints', () => {
  it('commits output per epoch and ends equal to the uninterrupted run; later snapshots are deltas', async () => {
    const input = eventsFile(dir, 'events.jsonl', 4000);
    const ref = Sinks.collect<unknown>();
    await new EmbeddedRuntime(countsJob(), { sources: { events: { kind: 'file', path: input } }, sinks: { out: ref as Sink<any> } }).run();
    const expected = ref.records.map((r) => JSON.stringify(r)).sort();
    expect(expected.length).toBeGreaterThan(100);

    const ck = join(dir, 'ck');
    const out = join(dir, 'out.jsonl');
    const sink = new CommittedFileSink<unknown>(out, join(ck, 'sinks', 'out'), false);
    const runtime = new LocalAwsRuntime(countsJob(), {
      env,
      sources: { events: { kind: 'file', path: input } },
      sinks: { out: sink },
      chunkSize: 200,
      checkpoints: { dir: ck, intervalMs: 100, start: 'fresh', sinks: [sink] },
    });
    const run = await runtime.run();
    expect(run.sourceRecords).toBe(4000);
    expect(sortedLines(readFileSync(out, 'utf8'))).toEqual(expected);
    const cp = runtime.checkpointing!;
    expect(cp.loop.committed.length).toBeGreaterThanOrEqual(2);

    // The last manifest's chains: a full snapshot first, deltas after it.
    const pointers = new DynamoDbPointerStore({ client: env.clients.dynamodb, tableName: `sluice-${cp.identity.runId}-counts`, job: 'counts' });
    const ptr = (await pointers.read<CommitPointer>(POINTER_NAME))!.value;
    expect(ptr.epoch).toBe(Math.max(...cp.loop.committed));
    const manifest = fromBytes<Manifest>((await cp.store.get(ptr.manifestKey))!);
    const links = Object.values(manifest.partitions).flatMap((p) => p.chain);
    expect(links.some((l) => !l.full)).toBe(true);
    // Source positions: every record of the input is in the last checkpoint.
    expect(Object.values(manifest.positions).reduce((a, b) => a + b, 0)).toBe(4000);
    // The coordinator's transitions are counted and priced.
    expect(run.accounting.get('stepfunctions', 'StateTransition').items).toBeGreaterThanOrEqual(8 * cp.loop.committed.length);
    expect(run.cost.lines.find((l) => l.service === 'stepfunctions')!.dollars).toBeGreaterThan(0);
    const ddbWrites = run.cost.lines.find((l) => l.unit === 'write units')!.quantity;
    console.log(
      `local-AWS with checkpoints every 100 ms: ${run.sourceRecords} events, ${(run.durationMs / 1000).toFixed(1)} s, ${cp.loop.committed.length} epochs, ` +
        `${run.accounting.get('s3', 'PutObject').requests} S3 PUTs, ${run.accounting.get('dynamodb', 'PutItem').requests} PutItem (acks), ${ddbWrites.toFixed(0)} DynamoDB write units, ` +
        `$${run.cost.dollars.toFixed(5)} = $${((run.cost.dollars / run.sourceRecords) * 1e6).toFixed(2)} per million events`,
    );
  }, 180_000);
});
