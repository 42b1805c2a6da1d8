/** The cost model's arithmetic (pure): rates per 1,000 events, the baselines, break-even, the coordinator's share. */
import { describe, expect, it } from 'vitest';
import { AWS_CALL_LATENCY_MS, breakEvenEventsPerMonth, modelledLambdaGbSeconds, coordinatorLines, dollarsPerMillion, idleMonthly, managedFlinkMonthly, mergeLines, naiveBaselinePerMillion, ratesOf } from '../../lib/aws/cost/cost-model.ts';
import { PRICES } from '../../lib/aws/cost/prices.ts';
import { ConfigError } from '../../lib/errors.ts';

describe('cost model', () => {
  it('scales each priced line to 1,000 events and dollars per million', () => {
    const rates = ratesOf(
      [
        { service: 'dynamodb', unit: 'write units', quantity: 500, dollars: 500 * PRICES.dynamoDbPerWriteUnit },
        { service: 'sqs', unit: '64 KB requests', quantity: 30, dollars: 30 * PRICES.sqsFifoPerRequest },
      ],
      20_000,
    );
    expect(rates[0]).toMatchObject({ service: 'dynamodb', unit: 'write units', perThousandEvents: 25 });
    expect(rates[0].dollarsPerMillionEvents).toBeCloseTo(0.015625, 12); // 25 WCU per 1,000 events = 25,000 per million
    expect(rates[1].perThousandEvents).toBe(1.5);
    expect(dollarsPerMillion({ dollars: 0.02 }, 20_000)).toBeCloseTo(1, 12);
    expect(() => ratesOf([], 0)).toThrow(ConfigError);
  });

  it('prices the naive baseline as one write unit and one SQS request per event', () => {
    expect(naiveBaselinePerMillion()).toBeCloseTo(0.625 + 0.5, 12);
  });

  it('bills the smallest Managed Flink application two KPUs (one for orchestration) plus its running storage', () => {
    const f = managedFlinkMonthly();
    expect(f.kpus).toBe(2);
    expect(f.kpuHours).toBe(1460);
    expect(f.computeDollars).toBeCloseTo(160.6, 9);
    expect(f.storageDollars).toBeCloseTo(5, 9);
    expect(f.dollars).toBeCloseTo(165.6, 9);
    expect(managedFlinkMonthly(4).kpus).toBe(5);
    expect(() => managedFlinkMonthly(0)).toThrow(/applicationKpus/);
  });

  it('finds the monthly volume at which pay per event equals a fixed bill', () => {
    expect(breakEvenEventsPerMonth(165.6, 0.05)).toBeCloseTo(3.312e9, 0);
    expect(breakEvenEventsPerMonth(0, 1)).toBe(0);
    // The dashboard and alarms are the whole fixed bill; other resources are per request.
    expect(idleMonthly({ 'AWS::CloudWatch::Dashboard': 1, 'AWS::CloudWatch::Alarm': 8, 'AWS::SQS::Queue': 4 })).toEqual({ dashboards: 1, alarms: 8, dollars: 3 + 0.8 });
    expect(idleMonthly({ 'AWS::Lambda::Function': 3 }).dollars).toBe(0);
    expect(() => breakEvenEventsPerMonth(100, 0)).toThrow(ConfigError);
  });

  it("models the coordinator's share from epochs at the interval during the events' span", () => {
    // 1.2 M events at 10,000/s = 120 s = 2 epochs of 60 s.
    const lines = coordinatorLines({ intervalSeconds: 60, transitionsPerEpoch: 8, taskInvocationsPerEpoch: 5, gbSecondsPerTask: 0.1, s3PutsPerEpoch: 6, writeUnitsPerEpoch: 8 }, 1_200_000, 10_000);
    const q = (service: string, unit: string) => lines.find((l) => l.service === service && l.unit === unit)!;
    expect(q('stepfunctions', 'transitions').quantity).toBe(16);
    expect(q('stepfunctions', 'transitions').dollars).toBeCloseTo(16 * 0.000025, 12);
    expect(q('lambda', 'requests').quantity).toBe(10);
    expect(q('lambda', 'GB-seconds').quantity).toBeCloseTo(1, 12);
    expect(q('s3', 'PUT/LIST requests').quantity).toBe(12);
    expect(q('dynamodb', 'write units').quantity).toBe(16);
    expect(() => coordinatorLines({ intervalSeconds: 0, transitionsPerEpoch: 8, taskInvocationsPerEpoch: 5, gbSecondsPerTask: 0.1, s3PutsPerEpoch: 6, writeUnitsPerEpoch: 8 }, 1, 1)).toThrow(/intervalSeconds/);
  });

  it('adds lines of the same service and unit', () => {
    const merged = mergeLines([{ service: 'lambda', unit: 'requests', quantity: 2, dollars: 4 }], [{ service: 'lambda', unit: 'requests', quantity: 1, dollars: 2 }, { service: 's3', unit: 'GET requests', quantity: 1, dollars: 1 }]);
    expect(merged).toEqual([
      { service: 'lambda', unit: 'requests', quantity: 3, dollars: 6 },
      { service: 's3', unit: 'GET requests', quantity: 1, dollars: 1 },
    ]);
  });

  it('models Lambda duration at AWS latencies: CPU plus waiting on the calls the function makes, not the poller\'s', () => {
    const gbs = modelledLambdaGbSeconds(
      [
        { service: 'dynamodb', operation: 'TransactWriteItems', requests: 10 },
        { service: 's3', operation: 'PutObject', requests: 2 },
        { service: 'sqs', operation: 'ReceiveMessage', requests: 100 },
      ],
      0.5,
      512,
    );
    expect(gbs).toBeCloseTo((0.5 + (10 * AWS_CALL_LATENCY_MS.dynamodb.TransactWriteItems + 2 * AWS_CALL_LATENCY_MS.s3.PutObject) / 1000) / 2, 12);
    expect(() => modelledLambdaGbSeconds([], -1, 512)).toThrow(/cpuSeconds/);
  });
});
