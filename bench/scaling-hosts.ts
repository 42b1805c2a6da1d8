/**
 * Where bench/scaling-advice.ts runs the job, behind one shape: an ingestion URL to load,
 * and what the scaling advice and its checks read (records processed, what waits, each
 * stage's records and busy time).
 *
 * - embedded: a `sluice dev` child process, read through GET /stats. Its scheduler runs a
 *   stage's partitions one batch after another, on one thread.
 * - local-aws: the Lambda handlers in this process against DynamoDB Local and fauxqs,
 *   behind a local Function URL. Each stage queue's event source invokes its handler
 *   concurrently, one invocation per message group (partition) at a time, as Lambda does,
 *   so partitions run side by side where the cost is waiting.
 */
import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { withParallelismFlag } from '../lib/cli/parallelism-flag.ts';
import type { Job } from '../lib/index.ts';
import { type StageLoad, stageInputs } from '../lib/runtime/scaling-advice.ts';
import { openLocalAws } from '../lib/testing/local-aws/endpoints.ts';
import { startFunctionUrl } from '../lib/testing/local-aws/http-ingest.ts';
import { LocalAwsRuntime } from '../lib/testing/local-aws/runner.ts';
import { startDev } from './dev-process.ts';

export interface Measured {
  /** Records the measured operator's stage took in. */
  processed: number;
  /** What waits: records in partition queues (embedded), messages in stage queues (local-aws). */
  queued: number;
  /** Age of the oldest accepted event not processed (embedded); null where not measured. */
  lagMs: number | null;
  loads: StageLoad[];
  /** Source records accepted so far. */
  sourceRecords: number;
  maxParallelism: number;
}

export interface ScalingHost {
  readonly url: string;
  /** The unit of Measured.queued. */
  readonly queuedUnit: string;
  read(): Promise<Measured>;
  stop(): Promise<void>;
}

/** `sluice dev <module> --parallelism P ...args`; `operator`: the operator whose records in count as processed. */
export async function embeddedHost(module: string, parallelism: number, args: readonly string[], operator: string): Promise<ScalingHost> {
  const dev = await startDev(module, ['--parallelism', String(parallelism), ...args]);
  return {
    url: dev.url,
    queuedUnit: 'records',
    read: async () => {
      const s = await dev.stats();
      return { processed: s.recordsIn[operator] ?? 0, queued: s.queuedRecords, lagMs: s.lagMs, loads: [...s.scaling.stages], sourceRecords: s.recordsIngested, maxParallelism: s.maxParallelism };
    },
    stop: async () => void (await dev.stop()),
  };
}

/** The job's handlers on local AWS at `parallelism`; `stage`: the stage name whose records in count as processed. */
export async function localAwsHost(job: Job, parallelism: number, stage: string): Promise<ScalingHost> {
  const env = await openLocalAws();
  const at = withParallelismFlag(job, [String(parallelism)]);
  const rt = new LocalAwsRuntime(at, { env });
  let server: Awaited<ReturnType<typeof startFunctionUrl>> | undefined;
  try {
    await rt.start();
    rt.feed();
    server = await startFunctionUrl(rt.ingest!, {
      port: 0,
      host: '127.0.0.1',
      onRequest: (result, ms) => {
        let accepted = 0;
        try {
          accepted = result.statusCode === 202 ? Number((JSON.parse(String(result.body)) as { accepted?: number }).accepted ?? 0) : 0;
        } catch {
          // not JSON: nothing accepted
        }
        rt.countIngested(accepted, ms);
      },
    });
  } catch (e) {
    await rt.stop().catch(() => {});
    await env.close();
    throw e;
  }
  const srv = server;
  const inputs = stageInputs(rt.plan);
  const measured = rt.plan.stages.find((s) => s.name === stage);
  if (!measured) throw new Error(`no stage "${stage}" in the plan (stages: ${rt.plan.stages.map((s) => s.name).join(', ')})`);
  return {
    url: srv.url,
    queuedUnit: 'messages',
    read: async () => {
      const r = rt.report();
      let queued = 0;
      for (const q of rt.queues) {
        const out = await env.clients.sqs.send(new GetQueueAttributesCommand({ QueueUrl: q.url, AttributeNames: ['ApproximateNumberOfMessages'] }));
        queued += Number(out.Attributes?.ApproximateNumberOfMessages ?? 0);
      }
      return {
        processed: r.stages[measured.id].recordsIn,
        queued,
        lagMs: null,
        loads: r.stages.map((s) => ({ name: s.name, partitions: rt.plan.stages[s.stage].parallelism, recordsIn: s.recordsIn, recordsOut: s.recordsOut, busyMs: s.metrics.billedMs, ...inputs[s.stage] })),
        sourceRecords: r.sourceRecords,
        maxParallelism: rt.plan.job.maxParallelism,
      };
    },
    stop: async () => {
      await srv.close();
      await rt.stop();
      await env.close();
    },
  };
}
