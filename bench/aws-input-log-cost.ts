/**
 * What the AWS input log adds to the cost: Nexmark Q5 in local-AWS mode with checkpoints
 * (so source partitions log their input, lib/aws/operator/input-log.ts), fed straight to the
 * source queue in chunks of --chunk events (one SQS message each, as one ingest request
 * would be), and the segments counted: objects (one S3 PUT each), inline ones, and the
 * write units of their items, priced with lib/aws/cost/prices.ts.
 *
 *   npx tsx bench/aws-input-log-cost.ts [events=20000] [chunk=2000]
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sinks, type Sink } from '../lib/api/sinks.ts';
import { openLocalAws } from '../lib/testing/local-aws/endpoints.ts';
import { LocalAwsRuntime } from '../lib/testing/local-aws/runner.ts';
import { PRICES } from '../lib/aws/cost/prices.ts';
import { compile } from '../lib/graph/compile.ts';
import { generateEvents } from '../lib/nexmark/generator.ts';
import q5 from '../examples/nexmark/q5.ts';

const N = Number(process.argv[2] ?? 20000);
const chunk = Number(process.argv[3] ?? 2000);
const env = await openLocalAws();
try {
  const job = q5({});
  const sinks: Record<string, Sink<any>> = {};
  for (const node of compile(job.graph).job.sinks()) sinks[node.name] = Sinks.collect<unknown>() as Sink<any>;
  const events = [...generateEvents(0, N, { seed: 42, ratePerSec: 10000 })];
  const rt = new LocalAwsRuntime(job, { env, sinks, sources: { events: { kind: 'items', items: events } }, chunkSize: chunk, checkpoints: { dir: mkdtempSync(join(tmpdir(), 'inlog-')), intervalMs: 10_000, start: 'fresh' } });
  const run = await rt.run();
  let wcu = 0, objects = 0, inline = 0, records = 0;
  for (const r of rt.accounting.rows()) {
    if (r.service === 'dynamodb-items' && r.operation === 'input put') wcu += r.estimatedWriteUnits;
    if (r.service === 'input-log') { records += r.items; if (r.operation === 'segment object') objects += r.requests; else inline += r.requests; }
  }
  const dollars = objects * PRICES.s3PerPut + wcu * PRICES.dynamoDbPerWriteUnit;
  console.log(JSON.stringify({ events: N, chunk, sourceRecords: run.sourceRecords, loggedRecords: records, objects, inline, itemWriteUnits: wcu, inputLogDollarsPerMillion: +((dollars / N) * 1e6).toFixed(4) }));
} finally {
  await env.close();
}
