/**
 * A deployed job's stage loads read from CloudWatch (lib/aws/stage-loads.ts): the queries
 * name the handlers' metrics by the dimensions they publish them with (service = job,
 * stage) and each stage function's Lambda Duration; every page and data point is summed;
 * a source stage's arrivals are what ingestion accepted when it ran behind. No local
 * server implements CloudWatch or the Lambda API, so the clients are mocks
 * (aws-sdk-client-mock).
 */
import { CloudWatchClient, GetMetricDataCommand, type GetMetricDataCommandInput } from '@aws-sdk/client-cloudwatch';
import { LambdaClient, ListEventSourceMappingsCommand } from '@aws-sdk/client-lambda';
import { mockClient } from 'aws-sdk-client-mock';
import { describe, expect, it } from 'vitest';
import { functionNameOf, readStageLoads, stageConsumers, stageLoadQueries, type StageMetricsRef } from '../../lib/aws/stage-loads.ts';

const credentials = { accessKeyId: 'x', secretAccessKey: 'x' };
const stages: StageMetricsRef[] = [
  { stage: 0, name: 'parse', partitions: 2, functions: ['orders-s0'], upstream: [], fedBySources: true },
  { stage: 1, name: 'totals', partitions: 1, functions: ['orders-s1a', 'orders-s1b'], upstream: [0], fedBySources: false },
];

describe('stage loads from CloudWatch', () => {
  it('asks for each stage its records in and out, its functions\' Duration, and for a source stage the events accepted', () => {
    const q = stageLoadQueries('orders', stages);
    expect(q.map((x) => x.Id)).toEqual(['in0', 'out0', 'acc0', 'busy0_0', 'in1', 'out1', 'busy1_0', 'busy1_1']);
    expect(q[0].MetricStat).toEqual({
      Metric: { Namespace: 'Sluice', MetricName: 'recordsIn', Dimensions: [{ Name: 'service', Value: 'orders' }, { Name: 'stage', Value: '0' }] },
      Period: 60,
      Stat: 'Sum',
    });
    expect(q[2].MetricStat!.Metric!.MetricName).toBe('eventsAccepted');
    expect(q[7].MetricStat).toEqual({ Metric: { Namespace: 'AWS/Lambda', MetricName: 'Duration', Dimensions: [{ Name: 'FunctionName', Value: 'orders-s1b' }] }, Period: 60, Stat: 'Sum' });
  });

  it('sums every data point of every page over the span before the end', async () => {
    const cw = new CloudWatchClient({ region: 'us-east-1', credentials });
    const mock = mockClient(cw);
    const inputs: GetMetricDataCommandInput[] = [];
    mock.on(GetMetricDataCommand).callsFake((input: GetMetricDataCommandInput) => {
      inputs.push(input);
      if (!input.NextToken) {
        return {
          MetricDataResults: [
            { Id: 'in0', Values: [30_000, 20_000] },
            { Id: 'acc0', Values: [40_000] },
            { Id: 'busy0_0', Values: [4_000] },
            { Id: 'in1', Values: [30_000] },
          ],
          NextToken: 'page2',
        };
      }
      return {
        MetricDataResults: [
          { Id: 'acc0', Values: [20_000] },
          { Id: 'out0', Values: [50_000] },
          { Id: 'busy1_0', Values: [40_000] },
          { Id: 'busy1_1', Values: [20_000] },
        ],
      };
    });
    const end = Date.UTC(2026, 11, 4, 12, 0);
    const m = await readStageLoads(cw, 'orders', stages, 10 * 60_000, end);
    expect(inputs).toHaveLength(2);
    expect(inputs[0].StartTime).toEqual(new Date(end - 600_000));
    expect(inputs[0].EndTime).toEqual(new Date(end));
    expect(inputs[1].NextToken).toBe('page2');
    expect(m.spanMs).toBe(600_000);
    expect(m.loads).toEqual([
      { name: 'parse', partitions: 2, recordsIn: 50_000, recordsOut: 50_000, busyMs: 4_000, upstream: [], fedBySources: true },
      { name: 'totals', partitions: 1, recordsIn: 30_000, recordsOut: 0, busyMs: 60_000, upstream: [0], fedBySources: false },
    ]);
    // 60,000 accepted (more than the 50,000 the source stage took in: it ran behind) over 600 s.
    expect(m.sourceRate).toBe(100);
  });

  it('finds each stage queue\'s functions and their maximum concurrency, every page', async () => {
    const lambda = new LambdaClient({ region: 'us-east-1', credentials });
    const mock = mockClient(lambda);
    mock
      .on(ListEventSourceMappingsCommand, { Marker: undefined })
      .resolves({ EventSourceMappings: [{ FunctionArn: 'arn:aws:lambda:us-east-1:123456789012:function:orders-s1', ScalingConfig: { MaximumConcurrency: 4 } }], NextMarker: 'm2' })
      .on(ListEventSourceMappingsCommand, { Marker: 'm2' })
      .resolves({ EventSourceMappings: [{ FunctionArn: 'arn:aws:lambda:us-east-1:123456789012:function:orders-s1:live' }] });
    expect(await stageConsumers(lambda, 'arn:aws:sqs:us-east-1:123456789012:orders-s1.fifo')).toEqual([
      { functionName: 'orders-s1', maxConcurrency: 4 },
      { functionName: 'orders-s1' },
    ]);
    expect(functionNameOf('plain-name')).toBe('plain-name');
  });
});
