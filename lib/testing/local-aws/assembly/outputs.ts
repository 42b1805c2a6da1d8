/**
 * Where a job's stages and sinks are in the assembly, and reading a sink's results:
 *
 * - stages: a stage queue is named `<prefix><job>-s<stage>.fifo` (lib/aws/naming.ts, the
 *   runtime's convention, which the handlers read too), its DLQ `...-s<stage>-dlq.fifo`;
 *   the function of a stage is the one its queue's event source mapping invokes;
 * - a stdout sink's records are the JSON lines its stage's function wrote to stdout that
 *   are neither log nor metric lines;
 * - `AwsSinks.dynamodbUpsert`: the items of its table (without the sink's own attributes);
 * - `AwsSinks.s3Files`: the committed files (readCommittedFiles: pointer and manifest chain).
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { S3Client } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient, ScanCommand } from '@aws-sdk/lib-dynamodb';
import type { PhysicalPlan } from '../../../graph/compile.ts';
import { stateTableName } from '../../../aws/naming.ts';
import { readCommittedFiles } from '../../../aws/sinks/s3-file-sink.ts';
import { PRODUCER_ATTRIBUTE, SEQ_ATTRIBUTE } from '../../../aws/sinks/sink-options.ts';
import type { StageQueues } from '../../../aws/sqs/sqs-queues.ts';
import { AssemblyTemplateError } from './errors.ts';
import type { AssemblyModel } from './model.ts';

export interface AssemblyStage {
  readonly stage: number;
  readonly queueLogicalId: string;
  readonly deadLetterQueueLogicalId: string;
  readonly functionLogicalId: string;
  /** Upstream URLs (the runner's own clients). */
  readonly queues: StageQueues;
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** The job's stages in the assembly, by stage id; every stage of the plan must have its queue, DLQ and function. */
export function stagesOf(model: AssemblyModel, plan: PhysicalPlan, upstreamUrls: ReadonlyMap<string, string>): AssemblyStage[] {
  const job = escape(plan.job.name);
  const stageRe = new RegExp(`^(.*)${job}-s(\\d+)\\.fifo$`);
  const dlqRe = new RegExp(`^(.*)${job}-s(\\d+)-dlq\\.fifo$`);
  const out: AssemblyStage[] = [];
  for (const stage of plan.stages) {
    const queue = [...model.queues.values()].find((q) => Number(stageRe.exec(q.name)?.[2]) === stage.id && !dlqRe.test(q.name));
    const dlq = queue?.deadLetter ? model.queues.get(queue.deadLetter.queueLogicalId) : [...model.queues.values()].find((q) => Number(dlqRe.exec(q.name)?.[2]) === stage.id);
    const esm = queue && model.eventSources.find((e) => e.queueLogicalId === queue.logicalId);
    if (!queue || !dlq || !esm) {
      const what = !queue ? `a queue named <prefix>${plan.job.name}-s${stage.id}.fifo` : !dlq ? `a dead-letter queue for ${queue.name}` : `an event source mapping on ${queue.name}`;
      throw new AssemblyTemplateError(model.templateFile, `stage ${stage.id} (${stage.name}) of job ${plan.job.name} has no ${what}: is this the assembly of this job?`);
    }
    out.push({
      stage: stage.id,
      queueLogicalId: queue.logicalId,
      deadLetterQueueLogicalId: dlq.logicalId,
      functionLogicalId: esm.functionLogicalId,
      queues: { url: upstreamUrls.get(queue.logicalId)!, arn: queue.arn, dlqUrl: upstreamUrls.get(dlq.logicalId)!, dlqArn: dlq.arn } as StageQueues,
    });
  }
  return out;
}

export interface SinkOutputContext {
  readonly model: AssemblyModel;
  readonly plan: PhysicalPlan;
  readonly dynamodb: DynamoDBClient;
  readonly s3: S3Client;
  /** The bucket a sink without its own defaults to (the functions' SLUICE_BUCKET). */
  readonly defaultBucket?: string;
}

/** The job's state table: the functions' SLUICE_TABLE, else the template's only table, else the naming convention's. */
export function stateTableOf(model: AssemblyModel, job: string): string {
  const fromEnv = [...model.functions.values()].map((f) => f.environment.SLUICE_TABLE).find(Boolean);
  if (fromEnv) return fromEnv;
  const tables = [...model.tables.values()];
  return tables.length === 1 ? tables[0].name : stateTableName(job);
}

/** The records of an AWS sink after the run. */
export async function awsSinkRecords(kind: string, resources: { table?: string; bucket?: string; prefix?: string } | undefined, c: SinkOutputContext): Promise<unknown[]> {
  const job = c.plan.job.name;
  if (kind === 'dynamodb-upsert') {
    const table = resources?.table;
    if (!table) throw new AssemblyTemplateError('sink', 'a DynamoDB upsert sink without a table');
    const items: unknown[] = [];
    const doc = DynamoDBDocumentClient.from(c.dynamodb);
    let start: Record<string, any> | undefined;
    do {
      const out = await doc.send(new ScanCommand({ TableName: table, ExclusiveStartKey: start }));
      for (const i of out.Items ?? []) {
        const item = { ...i };
        delete item[PRODUCER_ATTRIBUTE];
        delete item[SEQ_ATTRIBUTE];
        items.push(item);
      }
      start = out.LastEvaluatedKey;
    } while (start);
    return items;
  }
  if (kind === 's3-files') {
    const bucket = resources?.bucket ?? c.defaultBucket;
    if (!bucket) throw new AssemblyTemplateError('sink', 'an S3 file sink without a bucket, and no SLUICE_BUCKET in the functions');
    const base = resources?.bucket ? (resources.prefix ?? '') : `${job}/sinks/${resources?.prefix ?? ''}`;
    const { records } = await readCommittedFiles<unknown>({ s3: c.s3, dynamodb: c.dynamodb, bucket, base, tableName: stateTableOf(c.model, job), job });
    return records;
  }
  throw new AssemblyTemplateError('sink', `results of a ${kind} sink cannot be read back (stdout, dynamodb-upsert and s3-files can)`);
}

