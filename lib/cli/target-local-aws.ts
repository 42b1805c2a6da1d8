/**
 * `--target local-aws` for `sluice run` and `sluice dev`: the job through the real
 * Lambda handlers against local servers (lib/testing/local-aws/). Endpoints come from the SDK's
 * variables (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB, ..._SQS, ..._S3); for a
 * service without one, DynamoDB Local or fauxqs is started here and stopped at the end.
 */
import type { Sink } from '../api/sinks.ts';
import type { SourceBinding } from '../api/sources.ts';
import type { Job } from '../api/stream.ts';
import { type LocalAwsEnvironment, openLocalAws } from '../testing/local-aws/endpoints.ts';
import { crossFaultSites } from '../testing/local-aws/fault-sites.ts';
import { startFunctionUrl } from '../testing/local-aws/http-ingest.ts';
import { asDeadLetter } from '../testing/local-aws/dead-letters.ts';
import { type LocalAwsRunResult, LocalAwsRuntime } from '../testing/local-aws/runner.ts';
import { type CostEstimate, formatDollars, type LambdaUsage } from '../aws/cost/prices.ts';
import type { RejectedInput } from '../transport/sources.ts';
import type { DeadLetter } from '../transport/envelope.ts';
import type { LocalAwsRunCheckpoints } from './checkpoints.ts';
import type { DevSummary } from './dev-summary.ts';
import { loadJob, parseParams } from './load-job.ts';
import { withParallelismFlag } from './parallelism-flag.ts';
import { fmt } from './options.ts';
import { scalingAdvice } from '../runtime/scaling-advice.ts';
import { countShedAnswer, shedTotal } from './dead-letter-report.ts';
import { measureLocalAwsLoads } from '../testing/local-aws/stage-loads.ts';

type Log = (line: string) => void;

async function open(log: Log): Promise<LocalAwsEnvironment> {
  log('local-aws: resolving endpoints (starting DynamoDB Local and/or fauxqs where none is configured)...');
  const env = await openLocalAws();
  crossFaultSites(env.clients);
  log(`local-aws: DynamoDB ${env.dynamodb.origin}; SQS ${env.sqs.origin}; S3 ${env.s3.origin}`);
  return env;
}

/** Handler errors are retried and end as dead letters; print them only when debugging. */
const debugLog = (log: Log): Log | undefined => (process.env.SLUICE_DEBUG ? (l) => log(`  [debug] ${l}`) : undefined);

/**
 * What `sluice run` needs from a runtime (the EmbeddedRuntime's surface): run(), then
 * the rejected inputs and dead letters; plus the cost line for the end of the run.
 */
export class LocalAwsRun {
  rejectedInputs: RejectedInput[] = [];
  deadLetters: DeadLetter[] = [];
  result?: LocalAwsRunResult;

  constructor(
    private readonly job: Job,
    private readonly bindings: { sources: Record<string, SourceBinding<any>>; sinks: Record<string, Sink<any>> },
    private readonly log: Log,
    /** `--checkpoint-interval` and friends (lib/cli/checkpoints.ts). */
    private readonly checkpoints?: LocalAwsRunCheckpoints,
  ) {}

  async run(): Promise<{ sourceRecords: number; deadLetterFile?: string }> {
    const env = await open(this.log);
    try {
      const ck = this.checkpoints;
      const runtime = new LocalAwsRuntime(this.job, { env, ...this.bindings, log: debugLog(this.log), ...(ck ? { checkpoints: ck.checkpoints, onSourceRecords: ck.onSourceRecords } : {}) });
      if (ck) {
        await runtime.start();
        const c = runtime.checkpointing!;
        if (c.restoredEpoch) this.log(`restored checkpoint ${c.restoredEpoch} from ${ck.checkpoints.dir} in place (run ${c.identity.runId}, restore epoch ${c.restoreEpoch}); replaying ${c.replayedRecords} logged input records`);
      }
      this.result = await runtime.run();
      ck?.done(runtime.checkpointing);
      this.rejectedInputs = [...this.result.rejectedInputs];
      this.deadLetters = this.result.deadLetters.map(asDeadLetter);
      const file = runtime.checkpointing?.deadLetters?.path;
      return { sourceRecords: this.result.sourceRecords, ...(file !== undefined ? { deadLetterFile: file } : {}) };
    } finally {
      await env.close();
    }
  }

  printCost(): void {
    if (this.result) this.log(costLine(this.result.cost, this.result.lambda, this.result.sourceRecords));
  }
}


/** One line: what the run would have cost on AWS, and per million events. */
export function costLine(cost: CostEstimate, lambda: LambdaUsage, events: number): string {
  const q = (service: string, unit: string) => cost.lines.find((l) => l.service === service && l.unit === unit)?.quantity ?? 0;
  const s3 = q('s3', 'PUT/LIST requests') + q('s3', 'GET requests');
  const perMillion = events > 0 ? `, ${formatDollars((cost.dollars / events) * 1e6)} per million events` : '';
  return (
    `cost on AWS (us-east-1 prices as of ${cost.pricesAsOf}): ${fmt.int(lambda.invocations)} Lambda requests (${lambda.gbSeconds.toFixed(1)} GB-s), ` +
    `${fmt.int(q('sqs', '64 KB requests'))} SQS requests, ${fmt.int(q('dynamodb', 'write units'))} DynamoDB write units, ${fmt.int(q('dynamodb', 'read units'))} read units, ` +
    `${fmt.int(s3)} S3 requests, ${fmt.int(q('httpapi', 'requests'))} HTTP API requests = ${formatDollars(cost.dollars)}${perMillion}`
  );
}

/** `sluice dev --target local-aws`: the handlers behind a local Function URL, with a live table. */
export async function devLocalAwsCommand(jobPath: string, flags: { port: number; host: string }, opts: { param?: string[]; parallelism?: string[]; intervalMs?: number }, log: Log): Promise<DevSummary> {
  const job = withParallelismFlag(await loadJob(jobPath, parseParams(opts.param)), opts.parallelism);
  const env = await open(log);
  let runtime: LocalAwsRuntime | undefined;
  let server: Awaited<ReturnType<typeof startFunctionUrl>> | undefined;
  let summary: DevSummary | undefined;
  /** Events the ingest function's load shedding dropped, per stream and reason (from its answers). */
  const shed: Record<string, Record<string, number>> = {};
  try {
    runtime = new LocalAwsRuntime(job, { env, log: debugLog(log) });
    await runtime.start();
    runtime.feed();
    const rt = runtime;
    server = await startFunctionUrl(rt.ingest!, {
      port: flags.port,
      host: flags.host,
      onRequest: (result, ms, event) => {
        rt.accounting.record('httpapi', 'Request', { requests: 1 });
        let body: { accepted?: number; rejected?: { index: number; error: string }[]; shed?: { index: number; reason: string }[]; replay?: boolean } = {};
        try {
          body = JSON.parse(String(result.body));
        } catch {
          // not JSON: nothing accepted
        }
        const stream = decodeURIComponent(event.rawPath.split('/')[2] ?? '');
        for (const r of body.rejected ?? []) rt.rejectedInputs.push({ source: stream, position: `request ${event.requestContext.requestId}, event ${r.index}`, error: r.error });
        rt.countIngested(result.statusCode === 202 ? Number(body.accepted ?? 0) : 0, ms);
        countShedAnswer(shed, stream, result.statusCode, body);
      },
    });
    const streams = [...job.graph.sources()].filter((n) => n.spec.kind === 'source' && n.spec.source.binding.kind === 'ingest').map((n) => n.name);
    log(`sluice dev: job "${job.name}" on local AWS (run ${runtime.runId}: queues ${runtime.runId}-${job.name}-s<stage>.fifo, table ${runtime.tableName})`);
    log(`ingestion endpoint ${server.url}  (GET ${server.url}/healthz; the ingest Lambda handler behind a local Function URL)`);
    for (const s of streams) log(`  stream "${s}": POST ${server.url}/streams/${encodeURIComponent(s)}/events   (JSON array or JSON lines)`);
    if (streams.length === 0) log('  (the job has no ingestion streams)');
    if (streams[0]) log(`publish a file: sluice publish ${streams[0]} events.jsonl --url ${server.url}`);
    log('Ctrl-C to stop');

    const started = performance.now();
    const timer = setInterval(() => {
      for (const line of table(rt, performance.now() - started)) log(line);
    }, opts.intervalMs ?? 1000);
    await new Promise<void>((resolveStop) => {
      const stop = (signal: string) => {
        log(`${signal}: stopping...`);
        resolveStop();
      };
      process.once('SIGINT', () => stop('SIGINT'));
      process.once('SIGTERM', () => stop('SIGTERM'));
    });
    clearInterval(timer);
  } finally {
    await server?.close();
    if (runtime) {
      await runtime.stop();
      const dead = await runtime.deadLetters().catch(() => []);
      const r = runtime.report();
      const shedCount = shedTotal(shed);
      log(`stopped: ${fmt.int(r.sourceRecords)} records ingested, ${fmt.int(r.rejectedInputs.length)} rejected, ${shedCount ? `${fmt.int(shedCount)} shed (load shedding), ` : ''}${fmt.int(dead.length)} dead letters`);
      log(costLine(r.cost, r.lambda, r.sourceRecords));
      summary = {
        job: job.name,
        target: 'local-aws',
        url: server?.url ?? '',
        recordsIngested: r.sourceRecords,
        rejected: { invalid: r.rejectedInputs.length, overBounds: 0, requestsRefused: 0 },
        deadLetters: dead.length,
        deadLetterFile: null,
        lateDropped: null,
        shed,
        finalCheckpoint: null,
        failed: false,
      };
    }
    await env.close();
  }
  return summary!;
}

/**
 * The live table. `busy s`: the stage's invocations' summed duration (what Lambda bills);
 * `needs`: the partitions that take the input rate so far at that cost, as DS2 advises
 * (runtime/scaling-advice.ts), from the records the handlers counted (their recordsIn and
 * recordsOut metrics). Indicative locally: concurrent invocations share one process and its servers.
 */
function table(rt: LocalAwsRuntime, elapsedMs: number): string[] {
  const r = rt.report();
  const rate = elapsedMs > 0 ? r.sourceRecords / (elapsedMs / 1000) : 0;
  const advice = scalingAdvice(measureLocalAwsLoads(rt.plan, r, elapsedMs).loads, rate, rt.plan.job.maxParallelism);
  const lines = [`-- ${new Date().toISOString().slice(11, 19)}  ingested ${fmt.int(r.sourceRecords)} records (${fmt.int(rate)}/s), rejected ${fmt.int(r.rejectedInputs.length)}; ${formatDollars(r.cost.dollars)} so far on AWS prices`];
  lines.push(`   ${'stage'.padEnd(24)} ${'invocations'.padStart(11)} ${'messages'.padStart(9)} ${'records'.padStart(9)} ${'failed'.padStart(7)} ${'running'.padStart(7)} ${'busy s'.padStart(8)} ${'partitions'.padStart(10)} ${'needs'.padStart(5)}`);
  for (const [i, s] of r.stages.entries()) {
    const src = rt.sources[s.stage];
    const a = advice.stages[i];
    lines.push(
      `   ${s.name.padEnd(24)} ${fmt.int(s.metrics.invocations).padStart(11)} ${fmt.int(s.metrics.messages).padStart(9)} ${fmt.int(s.recordsIn).padStart(9)} ${fmt.int(s.metrics.failures).padStart(7)} ${fmt.int(src?.concurrency ?? 0).padStart(7)} ${(s.metrics.billedMs / 1000).toFixed(1).padStart(8)} ${String(a.partitions).padStart(10)} ${String(a.advisedPartitions ?? '-').padStart(5)}`,
    );
  }
  return lines;
}
