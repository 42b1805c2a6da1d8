/** A rejected event's reason names the field, what was expected and the value received (not only its type). */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { validateWithSchema } from '../../lib/api/sources.ts';
import { sqsUnsafe } from '../../lib/aws/ingest/ingest-handler.ts';

const schema = z.object({ id: z.number().int(), k: z.string(), tags: z.array(z.string()).optional() });

describe('schema rejections', () => {
  it('show the received value and its type', () => {
    expect(validateWithSchema(schema, { id: '7', k: 'a' })).toBe('id: Invalid input: expected number, received "7" (string)');
    expect(validateWithSchema(schema, { id: 1.5, k: 'a' })).toBe('id: Invalid input: expected int, received 1.5 (number)');
    expect(validateWithSchema(schema, 42)).toBe('(event): Invalid input: expected object, received 42 (number)');
    expect(validateWithSchema(schema, [1])).toBe('(event): Invalid input: expected object, received [1] (array)');
    expect(validateWithSchema(schema, { id: 1, k: 'a', tags: ['x', 3] })).toBe('tags.1: Invalid input: expected string, received 3 (number)');
  });

  it('a missing field or null reads as such; several issues are all listed', () => {
    expect(validateWithSchema(schema, { k: null })).toBe('id: Invalid input: expected number, received undefined; k: Invalid input: expected string, received null');
  });

  it('a long value is cut; one JSON cannot render is shown as text', () => {
    const message = validateWithSchema(schema, { id: 'x'.repeat(500), k: 'a' })!;
    expect(message).toMatch(/^id: Invalid input: expected number, received "x{79}\.\.\. \(string\)$/);
    expect(validateWithSchema(z.object({ n: z.string() }), { n: 10n })).toBe('n: Invalid input: expected string, received 10 (bigint)');
  });

  it('other issues get the received value appended', () => {
    expect(validateWithSchema(z.object({ n: z.number().min(5) }), { n: 2 })).toBe('n: Too small: expected number to be >=5, received 2');
  });
});

describe('characters SQS cannot carry', () => {
  it('name the field, the character and its position, what is allowed and the value received', () => {
    expect(sqsUnsafe({ note: 'nul\u0000' })).toBe(
      'note: contains U+0000 at position 3, a character SQS messages cannot carry; expected only tab, LF, CR, U+0020-U+D7FF, U+E000-U+FFFD, U+10000-U+10FFFF, received "nul\\u0000"',
    );
    expect(sqsUnsafe({ a: ['ok', '\ud800 alone'] })).toMatch(/^a\.1: contains a lone surrogate U\+D800 at position 0, .*received "\\ud800 alone"$/);
    expect(sqsUnsafe({ 'bad\u0001key': 1 })).toBe('bad\u0001key: the field name contains U+0001 at position 3, a character SQS messages cannot carry; received field name "bad\\u0001key"');
  });
});
