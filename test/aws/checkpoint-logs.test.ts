/**
 * Structured logs of the AWS path name the job, stage, partition and epoch: the checkpoint
 * function logs each step with its action, epoch and what comes next; each stage function
 * logs every barrier it acknowledges with its stage, partition and epoch (DynamoDB Local
 * and fauxqs, through the real handlers and the checkpoint steps).
 */
import type { Logger } from '@aws-lambda-powertools/logger';
import { describe, expect, it } from 'vitest';
import { CollectSink } from '../../lib/api/sinks.ts';
import { INITIAL_CARRY } from '../../lib/aws/checkpoint/checkpoint-task.ts';
import { awsJobPath } from '../support/aws-job-path.ts';
import { clickJob, CLICKS } from './click-job.ts';
import { unique } from './helpers.ts';

type Line = { level: string; message: string } & Record<string, unknown>;

function capture(): { logger: Logger; lines: Line[] } {
  const lines: Line[] = [];
  const at = (level: string) => (message: string, fields?: Record<string, unknown>) => void lines.push({ level, message, ...fields });
  const logger = { info: at('info'), warn: at('warn'), error: at('error'), debug: at('debug'), addContext: () => undefined } as unknown as Logger;
  return { logger, lines };
}

describe('structured logs on the AWS path', () => {
  it('the checkpoint steps log action, epoch and next; each partition logs the barrier it acknowledges, with stage, partition and epoch', async () => {
    const { logger, lines } = capture();
    const job = clickJob(unique('logs'));
    const aws = await awsJobPath(job, { 'running-out': new CollectSink(), 'window-out': new CollectSink() }, { prefix: 'logs', logger });
    try {
      await aws.publish('clicks', CLICKS);
      const c = await aws.step('resume', INITIAL_CARRY);
      await aws.epoch(c, true);
      const steps = lines.filter((l) => l.message === 'checkpoint step');
      expect(steps.map((l) => l.action)).toEqual(['resume', 'open', 'inject', 'decide', 'commit']);
      expect(steps.slice(1).map((l) => l.epoch)).toEqual([1, 1, 1, 1]);
      expect(steps.find((l) => l.action === 'decide')?.next).toBe('commit');
      const acked = lines.filter((l) => l.message === 'barrier acknowledged');
      const expected = aws.plan.stages.flatMap((s) => Array.from({ length: s.parallelism }, (_, p) => `${s.id}/${p} epoch 1`));
      expect(acked.map((l) => `${l.stage}/${l.partition} epoch ${l.epoch}`).sort()).toEqual(expected.sort());
      expect(lines.filter((l) => l.level === 'error')).toEqual([]);
    } finally {
      aws.close();
    }
  }, 60_000);
});
