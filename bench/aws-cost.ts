/**
 * AWS-path cost of the Nexmark queries: each query runs in local-AWS mode (the real
 * ingest and operator Lambda handlers against DynamoDB Local and fauxqs, started here),
 * every request and capacity unit is counted, and the price table (lib/aws/cost/prices.ts)
 * turns them into dollars per million events, next to the naive baseline (one DynamoDB
 * update and one SQS message per event), the smallest Managed Flink application's
 * monthly bill and the break-even volume.
 *
 *   npx tsx bench/aws-cost.ts [--query q5 | --query q5,q7] [--events 20000] [--rate 10000]
 *                             [--publish-batch 2000] [--parallelism N] [--memory 1024] [--compact-after N] [--json]
 *
 * Events come from the Nexmark generator (seed 42) at --rate events/s of event time and
 * are published to the ingest handler in requests of --publish-batch events, as a client
 * of the HTTP API would. The coordinator is not exercised by the run (checkpoints are not
 * wired on the AWS path yet): its share is modelled from the state machine's shape at its
 * default interval, at the stated rate. Lambda GB-seconds are the local handlers' wall time
 * at --memory MB (arm64 prices, as infra/ deploys): an upper bound, since the local
 * servers on a shared machine answer more slowly than AWS's. The state log is compacted
 * once at the end of each run, and that is counted too.
 */
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import { Sinks, type Sink } from '../lib/api/sinks.ts';
import type { Job } from '../lib/api/stream.ts';
import type { AwsAccounting } from '../lib/aws/cost/accounting.ts';
import { modelledLambdaGbSeconds, breakEvenEventsPerMonth, type CoordinatorShape, coordinatorLines, dollarsPerMillion, type FlinkMonthly, managedFlinkMonthly, mergeLines, naiveBaselinePerMillion, ratesOf, type UsageRate } from '../lib/aws/cost/cost-model.ts';
import { ITEM_KINDS_SERVICE } from '../lib/aws/dynamodb/dynamodb-layout.ts';
import { type LocalAwsEnvironment, openLocalAws } from '../lib/testing/local-aws/endpoints.ts';
import { LocalAwsRuntime } from '../lib/testing/local-aws/runner.ts';
import { type CostLine, estimateCost, formatDollars, PRICES } from '../lib/aws/cost/prices.ts';
import { compile } from '../lib/graph/compile.ts';
import { generateEvents, type NexmarkEvent } from '../lib/nexmark/index.ts';
import { QUERIES } from './nexmark/queries.ts';
import q0 from '../examples/nexmark/q0.ts';
import q1 from '../examples/nexmark/q1.ts';
import q11 from '../examples/nexmark/q11.ts';
import q2 from '../examples/nexmark/q2.ts';
import q3 from '../examples/nexmark/q3.ts';
import q4 from '../examples/nexmark/q4.ts';
import q5 from '../examples/nexmark/q5.ts';
import q7 from '../examples/nexmark/q7.ts';
import q8 from '../examples/nexmark/q8.ts';

/** The jobs as users run them on AWS: with their schemas (the ingest function validates). */
const JOBS: Record<string, (parallelism: number | undefined) => Job> = {
  q0: (p) => q0({ parallelism: p }),
  q1: (p) => q1({ parallelism: p }),
  q2: (p) => q2({ parallelism: p }),
  q3: (p) => q3({ parallelism: p }),
  q4: (p) => q4({ parallelism: p }),
  q5: (p) => q5({ parallelism: p }),
  q7: (p) => q7({ parallelism: p }),
  q8: (p) => q8({ parallelism: p }),
  q11: (p) => q11({ parallelism: p }),
};

/**
 * Events per ingest request: about 400 KB of Nexmark JSON, under the 512 KB in which an
 * HTTP API meters a request and the ingest function's 1 MB body limit. A client that
 * publishes in batches sends as much as one metered request carries.
 */
export const DEFAULT_PUBLISH_BATCH = 2000;

export interface AwsCostConfig {
  readonly events: number;
  readonly ratePerSec: number;
  readonly publishBatch: number;
  readonly parallelism?: number;
  readonly memoryMb: number;
  readonly seed: number;
  /** State log compaction every this many commits per partition (undefined: the backend's default, 1,000). */
  readonly compactAfterCommits?: number;
  /** The checkpoint interval the coordinator's share is modelled at (the state machine's default). */
  readonly coordinatorIntervalSeconds: number;
  readonly transitionsPerEpoch: number;
}

export interface QueryCost {
  readonly query: string;
  readonly events: number;
  readonly outputs: number;
  readonly durationMs: number;
  readonly invocations: number;
  readonly rates: UsageRate[];
  readonly dollarsPerMillion: number;
  /** Dollars per million events by service (coordinator included). */
  readonly byService: Record<string, number>;
  /** DynamoDB write units per 1,000 events by request operation and by item kind of the commits. */
  readonly dynamoDbWrites: { readonly byOperation: Record<string, number>; readonly byItemKind: Record<string, number> };
  /** Lambda duration as measured against the local servers (wall time; an upper bound), and the total with it. */
  readonly measuredDuration: { readonly gbSecondsPerThousand: number; readonly dollarsPerMillion: number };
  readonly coordinatorPerMillion: number;
  readonly baselinePerMillion: number;
  readonly ratioToBaseline: number;
  readonly breakEvenEventsPerMonth: number;
}

export interface AwsCostReport {
  readonly config: AwsCostConfig;
  readonly pricesAsOf: string;
  readonly managedFlink: FlinkMonthly;
  readonly results: QueryCost[];
}

/** The coordinator at its default interval: 5 tasks, a snapshot per stage partition plus manifest and stats, acks and pointers. */
export function coordinatorShape(job: Job, cfg: Pick<AwsCostConfig, 'coordinatorIntervalSeconds' | 'transitionsPerEpoch'>): CoordinatorShape {
  const partitions = compile(job.graph).stages.reduce((n, s) => n + s.parallelism, 0);
  return {
    intervalSeconds: cfg.coordinatorIntervalSeconds,
    transitionsPerEpoch: cfg.transitionsPerEpoch,
    taskInvocationsPerEpoch: 5,
    gbSecondsPerTask: 0.1,
    s3PutsPerEpoch: partitions + 2,
    writeUnitsPerEpoch: partitions + 4,
  };
}

function writeBreakdown(accounting: AwsAccounting, events: number): QueryCost['dynamoDbWrites'] {
  const byOperation: Record<string, number> = {};
  const byItemKind: Record<string, number> = {};
  for (const r of accounting.rows()) {
    const units = Math.max(r.estimatedWriteUnits, r.writeUnits);
    if (!units) continue;
    if (r.service === 'dynamodb') byOperation[r.operation] = (units / events) * 1000;
    if (r.service === ITEM_KINDS_SERVICE) byItemKind[r.operation] = (units / events) * 1000;
  }
  return { byOperation, byItemKind };
}

export async function measureQuery(env: LocalAwsEnvironment, name: string, events: readonly NexmarkEvent[], cfg: AwsCostConfig, flink: FlinkMonthly): Promise<QueryCost> {
  const makeJob = JOBS[name];
  const job = makeJob(cfg.parallelism);
  const sinks: Record<string, Sink<any>> = {};
  const collected: { records: unknown[] }[] = [];
  for (const node of compile(job.graph).job.sinks()) {
    const s = Sinks.collect<unknown>();
    collected.push(s);
    sinks[node.name] = s as Sink<any>;
  }
  const runtime = new LocalAwsRuntime(job, { env, sinks, sources: { events: { kind: 'items', items: events } }, chunkSize: cfg.publishBatch, memoryLimitInMB: cfg.memoryMb, compactAfterCommits: cfg.compactAfterCommits });
  const cpu0 = process.cpuUsage();
  const run = await runtime.run();
  // A run shorter than the state log's compaction period would never pay for compaction:
  // compact every partition once at the end and count it (more often than by default).
  const { DynamoDbStateBackend } = await import('../lib/aws/dynamodb/dynamodb-state.ts');
  const backend = new DynamoDbStateBackend({ client: env.clients.dynamodb, tableName: runtime.tableName, accounting: runtime.accounting });
  for (const stage of runtime.plan.stages) {
    for (let partition = 0; partition < stage.parallelism; partition++) {
      const scope = { job: runtime.plan.job.name, stage: stage.id, partition };
      await backend.recover(scope);
      if (!(await backend.compact(scope))) throw new Error(`${name}: compacting ${stage.name}/${partition} failed`);
    }
  }
  const cpu = process.cpuUsage(cpu0);
  // Lambda duration at AWS latencies (the headline) and as measured against the local servers (an upper bound).
  const gbSeconds = modelledLambdaGbSeconds(runtime.accounting.rows(), (cpu.user + cpu.system) / 1e6, cfg.memoryMb);
  const measured = estimateCost(runtime.accounting, run.lambda);
  const cost = estimateCost(runtime.accounting, { invocations: run.lambda.invocations, gbSeconds });
  if (run.sourceRecords !== events.length) throw new Error(`${name}: ${run.sourceRecords} of ${events.length} events accepted (rejected: ${run.rejectedInputs[0]?.error ?? 'none'})`);
  if (run.deadLetters.length) throw new Error(`${name}: ${run.deadLetters.length} dead letters`);
  const coordinator = coordinatorLines(coordinatorShape(job, cfg), events.length, cfg.ratePerSec);
  const lines: CostLine[] = mergeLines(cost.lines, coordinator);
  const total = { dollars: lines.reduce((n, l) => n + l.dollars, 0) };
  const perMillion = dollarsPerMillion(total, events.length);
  const byService: Record<string, number> = {};
  for (const r of ratesOf(lines, events.length)) byService[r.service] = (byService[r.service] ?? 0) + r.dollarsPerMillionEvents;
  const baseline = naiveBaselinePerMillion();
  return {
    query: name,
    events: events.length,
    outputs: collected.reduce((n, c) => n + c.records.length, 0),
    durationMs: run.durationMs,
    invocations: run.lambda.invocations,
    rates: ratesOf(lines, events.length),
    dollarsPerMillion: perMillion,
    byService,
    dynamoDbWrites: writeBreakdown(run.accounting, events.length),
    measuredDuration: {
      gbSecondsPerThousand: (run.lambda.gbSeconds / events.length) * 1000,
      dollarsPerMillion: perMillion + dollarsPerMillion({ dollars: (run.lambda.gbSeconds - gbSeconds) * PRICES.lambdaPerGbSecond }, events.length),
    },
    coordinatorPerMillion: dollarsPerMillion({ dollars: coordinator.reduce((n, l) => n + l.dollars, 0) }, events.length),
    baselinePerMillion: baseline,
    ratioToBaseline: baseline / perMillion,
    breakEvenEventsPerMonth: breakEvenEventsPerMonth(flink.dollars, perMillion),
  };
}

/** Run the queries against local servers started (or configured) here. */
export async function measureAwsCost(names: readonly string[], cfg: AwsCostConfig, say: (line: string) => void): Promise<AwsCostReport> {
  for (const n of names) if (!JOBS[n]) throw new Error(`--query: expected one of ${Object.keys(JOBS).join(', ')}, received "${n}"`);
  const events = [...generateEvents(0, cfg.events, { seed: cfg.seed, ratePerSec: cfg.ratePerSec })];
  const flink = managedFlinkMonthly(1);
  say(`AWS-path cost (local-AWS mode, us-east-1 prices as of ${PRICES.asOf}): ${cfg.events.toLocaleString('en-US')} Nexmark events (seed ${cfg.seed}) at ${cfg.ratePerSec.toLocaleString('en-US')} events/s,`);
  say(`published ${cfg.publishBatch} events per ingest request; Lambda batches of 10 messages, ${cfg.memoryMb} MB; state log compacted every ${cfg.compactAfterCommits ?? '1,000 (default)'} commits and at the end; coordinator modelled at one epoch per ${cfg.coordinatorIntervalSeconds} s (${cfg.transitionsPerEpoch} transitions each)`);
  say('starting DynamoDB Local and fauxqs (or using AWS_ENDPOINT_URL*)...');
  const env = await openLocalAws();
  const results: QueryCost[] = [];
  try {
    for (const n of names) {
      const r = await measureQuery(env, n, events, cfg, flink);
      results.push(r);
      for (const line of queryReport(r)) say(line);
    }
  } finally {
    await env.close();
  }
  const report: AwsCostReport = { config: cfg, pricesAsOf: PRICES.asOf, managedFlink: flink, results };
  for (const line of summary(report)) say(line);
  return report;
}

const num = (n: number) => (n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n >= 0.01 || n === 0 ? n.toFixed(2) : n.toExponential(1));
const money = (d: number) => formatDollars(d);

export function queryReport(r: QueryCost): string[] {
  const out = [`\n${r.query}: ${r.events.toLocaleString('en-US')} events -> ${r.outputs.toLocaleString('en-US')} rows in ${(r.durationMs / 1000).toFixed(1)} s, ${r.invocations} Lambda invocations`];
  out.push(`  ${'service'.padEnd(14)} ${'unit'.padEnd(18)} ${'per 1,000 events'.padStart(16)} ${'$ per M events'.padStart(14)}`);
  for (const x of r.rates) {
    if (!x.perThousandEvents) continue;
    out.push(`  ${x.service.padEnd(14)} ${x.unit.padEnd(18)} ${num(x.perThousandEvents).padStart(16)} ${money(x.dollarsPerMillionEvents).padStart(14)}`);
  }
  const ops = Object.entries(r.dynamoDbWrites.byOperation).map(([k, v]) => `${k} ${num(v)}`).join(', ');
  const kinds = Object.entries(r.dynamoDbWrites.byItemKind).map(([k, v]) => `${k} ${num(v)}`).join(', ');
  out.push(`  DynamoDB write units per 1,000 events by request: ${ops || 'none'}`);
  out.push(`    by item of the commits (transactional): ${kinds || 'none'}`);
  out.push(`  Lambda GB-seconds above: CPU time plus AWS call latencies (modelled); as measured against the local servers ${num(r.measuredDuration.gbSecondsPerThousand)} per 1,000 events (upper bound: ${money(r.measuredDuration.dollarsPerMillion)} per million events)`);
  out.push(`  total ${money(r.dollarsPerMillion)} per million events (coordinator ${money(r.coordinatorPerMillion)}); naive baseline ${money(r.baselinePerMillion)}: ${r.ratioToBaseline.toFixed(1)}x below`);
  return out;
}

export function summary(report: AwsCostReport): string[] {
  const f = report.managedFlink;
  const out = [
    `\nManaged Service for Apache Flink, smallest application: ${f.kpus} KPUs (1 + orchestration) x ${PRICES.hoursPerMonth} h x $${PRICES.managedFlinkPerKpuHour} = ${money(f.computeDollars)} + ${money(f.storageDollars)} running storage = ${money(f.dollars)} a month`,
    '',
    '| query | $ per M events | Lambda | SQS | DynamoDB | S3 | HTTP API | coordinator (SFN) | vs. naive | break-even vs. Managed Flink (events/month) | with measured Lambda duration |',
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const r of report.results) {
    const s = (k: string) => money(r.byService[k] ?? 0);
    out.push(`| ${r.query} | ${money(r.dollarsPerMillion)} | ${s('lambda')} | ${s('sqs')} | ${s('dynamodb')} | ${s('s3')} | ${s('httpapi')} | ${s('stepfunctions')} | ${r.ratioToBaseline.toFixed(1)}x | ${(r.breakEvenEventsPerMonth / 1e9).toFixed(2)} G | ${money(r.measuredDuration.dollarsPerMillion)} |`);
  }
  return out;
}

function intFlag(raw: string | undefined, flag: string, fallback: number, min: number): number {
  if (raw === undefined) return fallback;
  const v = Number(raw.replace(/_/g, ''));
  if (!Number.isSafeInteger(v) || v < min) {
    console.error(`aws-cost: --${flag}: expected an integer >= ${min}, received "${raw}"`);
    process.exit(2);
  }
  return v;
}

export const COST_OPTIONS = {
  query: { type: 'string', multiple: true },
  events: { type: 'string' },
  rate: { type: 'string' },
  'publish-batch': { type: 'string' },
  parallelism: { type: 'string' },
  memory: { type: 'string' },
  seed: { type: 'string' },
  'compact-after': { type: 'string' },
  json: { type: 'boolean', default: false },
} as const;

/** The configuration from parsed flags (shared with `npm run bench`'s cost section). */
export async function costConfig(values: { events?: string; rate?: string; 'publish-batch'?: string; parallelism?: string; memory?: string; seed?: string; 'compact-after'?: string }): Promise<AwsCostConfig> {
  // The state machine's own defaults (infra/), so the model follows the deployed loop.
  const { checkpointPlan } = await import('../infra/checkpoint-state-machine.ts');
  const plan = checkpointPlan();
  return {
    events: intFlag(values.events, 'events', 20_000, 1),
    ratePerSec: intFlag(values.rate, 'rate', 10_000, 1),
    publishBatch: intFlag(values['publish-batch'], 'publish-batch', DEFAULT_PUBLISH_BATCH, 1),
    parallelism: values.parallelism === undefined ? undefined : intFlag(values.parallelism, 'parallelism', 2, 1),
    memoryMb: intFlag(values.memory, 'memory', 1024, 128),
    seed: intFlag(values.seed, 'seed', 42, 0),
    compactAfterCommits: values['compact-after'] === undefined ? undefined : intFlag(values['compact-after'], 'compact-after', 1000, 1),
    coordinatorIntervalSeconds: plan.intervalSeconds,
    transitionsPerEpoch: plan.transitionsPerEpoch,
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: COST_OPTIONS });
  const names = (values.query ?? QUERIES.map((q) => q.name)).flatMap((s) => s.split(',')).map((s) => s.trim().toLowerCase());
  const say = values.json ? (line: string) => console.error(line) : (line: string) => console.log(line);
  const report = await measureAwsCost(names, await costConfig(values), say);
  if (values.json) console.log(JSON.stringify(report, null, 2));
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main();
