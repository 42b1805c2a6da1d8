/** The AWS cost benchmark's report (pure parts): the coordinator's shape from a job's plan, and the lines it prints. */
import { describe, expect, it } from 'vitest';
import { type AwsCostReport, coordinatorShape, type QueryCost, queryReport, summary } from '../../bench/aws-cost.ts';
import q5 from '../../examples/nexmark/q5.ts';
import { managedFlinkMonthly } from '../../lib/aws/cost/cost-model.ts';

const result: QueryCost = {
  query: 'q5',
  events: 100_000,
  outputs: 9,
  durationMs: 12_000,
  invocations: 400,
  rates: [
    { service: 'dynamodb', unit: 'write units', perThousandEvents: 40, dollarsPerMillionEvents: 0.025 },
    { service: 'httpapi', unit: 'requests', perThousandEvents: 0, dollarsPerMillionEvents: 0 },
  ],
  dollarsPerMillion: 0.04,
  byService: { dynamodb: 0.025, lambda: 0.015 },
  dynamoDbWrites: { byOperation: { TransactWriteItems: 40 }, byItemKind: { 'log put': 12 } },
  measuredDuration: { gbSecondsPerThousand: 4, dollarsPerMillion: 0.09 },
  coordinatorPerMillion: 0.0004,
  baselinePerMillion: 1.125,
  ratioToBaseline: 28.125,
  breakEvenEventsPerMonth: 4.14e9,
};

describe('aws cost report', () => {
  it('models the coordinator with a snapshot per stage partition, at the given interval', () => {
    const shape = coordinatorShape(q5({ parallelism: 2 }), { coordinatorIntervalSeconds: 60, transitionsPerEpoch: 8 });
    // Q5: three stages of two partitions.
    expect(shape).toMatchObject({ intervalSeconds: 60, transitionsPerEpoch: 8, s3PutsPerEpoch: 8, writeUnitsPerEpoch: 10 });
  });

  it('prints units per 1,000 events (skipping unused lines), the breakdown and the comparison', () => {
    const lines = queryReport(result).join('\n');
    expect(lines).toMatch(/dynamodb\s+write units\s+40\.0\s+\$0\.025/);
    expect(lines).not.toMatch(/httpapi/);
    expect(lines).toMatch(/by request: TransactWriteItems 40\.0/);
    expect(lines).toMatch(/log put 12\.0/);
    expect(lines).toMatch(/total \$0\.040 per million events .*naive baseline \$1\.13: 28\.1x below/);
  });

  it('tabulates every query with the Managed Flink bill and break-even', () => {
    const report: AwsCostReport = {
      config: { events: 100_000, ratePerSec: 10_000, publishBatch: 2000, memoryMb: 1024, seed: 42, coordinatorIntervalSeconds: 60, transitionsPerEpoch: 8 },
      pricesAsOf: '2025-06',
      managedFlink: managedFlinkMonthly(),
      results: [result],
    };
    const out = summary(report).join('\n');
    expect(out).toMatch(/2 KPUs .* = \$165\.60 a month/);
    expect(out).toMatch(/\| q5 \| \$0\.040 \| \$0\.015 \| \$0 \| \$0\.025 \|.*\| 28\.1x \| 4\.14 G \| \$0\.090 \|/);
  });
});
