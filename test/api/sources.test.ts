/** Source definitions refuse arguments an untyped job (run by tsx, not type-checked) can get wrong. */
import { describe, expect, it } from 'vitest';
import { Job } from '../../lib/api/stream.ts';
import { JobDefinitionError } from '../../lib/errors.ts';

describe('fromFile', () => {
  it('names the source and what it received when the options are passed as the path', () => {
    const job = new Job('clicks');
    const call = () => job.fromFile('clicks', { timestamp: (e: { ts: number }) => e.ts } as unknown as string);
    expect(call).toThrow(JobDefinitionError);
    expect(call).toThrow(/operator "clicks": expected fromFile\(name, path, options\): a file path string as the second argument, received an object/);
  });

  it('takes a path', () => {
    expect(() => new Job('clicks').fromFile('clicks', 'clicks.jsonl')).not.toThrow();
  });
});
