/** `sluice publish <stream> <file>`: flags checked, the file published (publish.ts), the result printed. */
import { z } from 'zod';
import { fmt, validateFlags } from './options.ts';
import { type PublishResult, publishFile, type SignMode } from './publish.ts';

export interface PublishCommandOptions {
  url: string;
  batchSize: string;
  sign: SignMode;
  region?: string;
  service?: string;
}

export async function publishCommand(stream: string, file: string, opts: PublishCommandOptions, out: (line: string) => void = (l) => process.stderr.write(l + '\n')): Promise<PublishResult> {
  const { batchSize } = validateFlags(z.object({ batchSize: z.coerce.number().int().positive() }), { batchSize: opts.batchSize }, {
    batchSize: { flag: '--batch-size', expected: 'a positive integer' },
  });
  const result = await publishFile({ url: opts.url, stream, file, batchSize, progress: process.stderr.isTTY === true, sign: opts.sign, region: opts.region, service: opts.service });
  out(`published ${file} to "${stream}": ${fmt.int(result.accepted)} accepted, ${fmt.int(result.rejected.length)} rejected${result.shed.length ? `, ${fmt.int(result.shed.length)} shed by the stream's load shedding (first line ${result.shed[0].line}: ${result.shed[0].reason})` : ''}`);
  for (const r of result.rejected.slice(0, 10)) out(`  line ${r.line}: ${r.error}`);
  if (result.rejected.length > 10) out(`  ... and ${fmt.int(result.rejected.length - 10)} more`);
  // A resend after a lost answer that the endpoint had already taken: counted once, with its first answer.
  for (const r of result.replayed.slice(0, 10)) out(`  lines ${r.lines}: already accepted (a replay of Idempotency-Key ${r.idempotencyKey}; its first answer, nothing enqueued twice)`);
  if (result.replayed.length > 10) out(`  ... and ${fmt.int(result.replayed.length - 10)} more replayed batches`);
  return result;
}
