/**
 * The handlers' metrics as CloudWatch receives them (Powertools' embedded metric format
 * on stdout): every metric carries the service and the stage; an incident of a partition
 * is also published per job (the alarm's) and per partition; lag is the age of a group's
 * oldest message; the ingest function's metrics carry the stage of the stream.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { SQSClient } from '@aws-sdk/client-sqs';
import { Metrics } from '@aws-lambda-powertools/metrics';
import type { SQSEvent } from 'aws-lambda';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { job as q5 } from '../../examples/nexmark/q5.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { countIncident, groupLag, METRICS_NAMESPACE, OPERATOR_METRICS, stageDimension } from '../../lib/aws/handler-metrics.ts';
import { createIngestHandler } from '../../lib/aws/ingest/ingest-handler.ts';
import { stageQueueName } from '../../lib/aws/naming.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { WAKE_BODY } from '../../lib/aws/sqs/sqs-codec.ts';

interface Emf {
  readonly _aws: { readonly CloudWatchMetrics: { readonly Namespace: string; readonly Dimensions: string[][]; readonly Metrics: { Name: string; Unit: string }[] }[] };
  readonly [key: string]: unknown;
}

let lines: string[];
beforeEach(() => {
  lines = [];
  vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
    lines.push(String(chunk));
    return true;
  });
});
afterEach(() => vi.restoreAllMocks());

const emitted = (): Emf[] => lines.flatMap((l) => l.split('\n')).filter((l) => l.startsWith('{"_aws"')).map((l) => JSON.parse(l) as Emf);
/** Each metric name with its dimension sets and value, as CloudWatch files them. */
const published = () =>
  emitted().flatMap((e) => e._aws.CloudWatchMetrics.flatMap((d) => d.Metrics.map((m) => ({ name: m.Name, unit: m.Unit, namespace: d.Namespace, dimensions: d.Dimensions.map((set) => Object.fromEntries(set.map((k) => [k, e[k]]))), value: e[m.Name] }))));

const metrics = () => new Metrics({ namespace: METRICS_NAMESPACE, serviceName: 'shop' });

describe('handler metrics', () => {
  it('counts an incident per stage, per job and per partition', () => {
    const m = metrics();
    stageDimension(m, 2);
    countIncident(m, OPERATOR_METRICS.stalledPartitions, 2, '7');
    m.publishStoredMetrics();
    const got = published().filter((p) => p.name === 'stalledPartitions');
    expect(got.map((p) => p.dimensions).sort((a, b) => Object.keys(a[0]).length - Object.keys(b[0]).length)).toEqual([
      [{ service: 'shop' }],
      [{ service: 'shop', stage: '2' }],
      [{ service: 'shop', stage: '2', partition: '7' }],
    ]);
    for (const p of got) expect(p).toMatchObject({ namespace: 'Sluice', unit: 'Count', value: 1 });
  });

  it('measures lag from the oldest SentTimestamp of a group', () => {
    expect(groupLag([{ attributes: { SentTimestamp: '1500' } }, { attributes: { SentTimestamp: '1200' } }], 2000)).toBe(800);
    expect(groupLag([{ attributes: {} }], 2000)).toBeUndefined();
    // A clock behind SQS's never makes a negative lag.
    expect(groupLag([{ attributes: { SentTimestamp: '2500' } }], 2000)).toBe(0);
  });

  it('publishes the operator function\'s invocation metrics with its stage', async () => {
    const clock = new ManualClock(10_000);
    // Wake-up messages outside any partition make no AWS call: the handler only counts them.
    const handler = createOperatorHandler({ job: q5, sqs: new SQSClient({ region: 'us-east-1' }), dynamodb: new DynamoDBClient({ region: 'us-east-1' }), clock, metrics: metrics() });
    const arn = `arn:aws:sqs:us-east-1:123456789012:${stageQueueName(q5.name, 1)}`;
    const record = (id: string, sent: number) => ({ messageId: id, receiptHandle: id, body: WAKE_BODY, attributes: { MessageGroupId: 'wake', SentTimestamp: String(sent), ApproximateReceiveCount: '1' }, messageAttributes: {}, md5OfBody: '', eventSource: 'aws:sqs', eventSourceARN: arn, awsRegion: 'us-east-1' });
    const event = { Records: [record('a', 7_000), record('b', 9_000)] } as unknown as SQSEvent;
    expect(await handler(event)).toEqual({ batchItemFailures: [] });
    const got = published();
    expect(got.find((p) => p.name === 'messages')).toMatchObject({ dimensions: [{ service: 'shop', stage: '1' }], value: 2 });
    expect(got.find((p) => p.name === 'lag')).toMatchObject({ unit: 'Milliseconds', dimensions: [{ service: 'shop', stage: '1' }], value: 3_000 });
    for (const p of got) expect(p.dimensions).toEqual([{ service: 'shop', stage: '1' }]);
  });

  it('publishes the ingest function\'s metrics with the stage of the stream, a request for no stream under the service alone', async () => {
    const handler = createIngestHandler({ job: q5, sqs: new SQSClient({ region: 'us-east-1' }), metrics: metrics() });
    const stream = [...q5.graph.sources()].map((n) => n.name)[0];
    const request = (path: string) => ({ rawPath: path, headers: { 'content-type': 'text/plain' }, body: 'x', requestContext: { http: { method: 'POST' } } }) as never;
    // An unsupported content type is answered before any AWS call, after the stream was found.
    expect((await handler(request(`/streams/${stream}/events`))).statusCode).toBe(415);
    expect((await handler(request('/streams/none/events'))).statusCode).toBe(404);
    const requests = published().filter((p) => p.name === 'requests');
    expect(requests.map((p) => p.dimensions)).toEqual([[{ service: 'shop', stage: '0' }], [{ service: 'shop' }]]);
  });
});
