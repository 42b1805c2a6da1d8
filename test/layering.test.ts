/**
 * The layering (test/support/import-graph.ts LAYERS) holds for every import of lib/,
 * infra/, functions/ and examples/, type imports included (so no two folders import each other),
 * and no files import each other in a cycle. No file of them is over 500 lines.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { relative } from 'node:path';
import { fileCycles, layeringViolation, readImports, sourceFiles } from './support/import-graph.ts';

const imports = readImports(process.cwd());

describe('layering', () => {
  it('every import goes down the layers', () => {
    const broken = [...new Set(imports.flatMap((i) => (layeringViolation(i) === undefined ? [] : [`${i.from} -> ${i.to}: ${layeringViolation(i)}`])))].sort();
    expect(broken, 'imports against the layering').toEqual([]);
  });

  it('no files import each other in a cycle', () => {
    expect(fileCycles(imports).map((c) => c.join(' ')), 'import cycles').toEqual([]);
  });

  it('no source file is over 500 lines', () => {
    const files = sourceFiles(process.cwd()).map((f) => relative(process.cwd(), f));
    const long = files.map((f) => [f, readFileSync(f, 'utf8').split('\n').length - 1] as const).filter(([, n]) => n > 500);
    expect(long.map(([f, n]) => `${f}: ${n} lines`)).toEqual([]);
    expect(files.length).toBeGreaterThan(200);
  });

  it('the checks are not vacuous', () => {
    expect(layeringViolation({ from: 'lib/api/stream.ts', to: 'lib/runtime/operator.ts' })).toMatch(/api imports runtime/);
    expect(layeringViolation({ from: 'lib/aws/x.ts', to: 'lib/local/y.ts' })).toMatch(/side by side/);
    expect(layeringViolation({ from: 'lib/runtime/x.ts', to: 'lib/api/y.ts' })).toBeUndefined();
    expect(layeringViolation({ from: 'lib/runtime/x.ts', to: 'lib/checkpoint/y.ts' })).toBeUndefined();
    expect(layeringViolation({ from: 'lib/checkpoint/x.ts', to: 'lib/runtime/y.ts' })).toMatch(/checkpoint imports runtime/);
    expect(layeringViolation({ from: 'lib/operators/x.ts', to: 'lib/checkpoint/y.ts' })).toMatch(/side by side/);
    expect(layeringViolation({ from: 'lib/api/sinks.ts', to: 'lib/aws/sinks/sink-options.ts' })).toMatch(/api imports aws/);
    expect(layeringViolation({ from: 'lib/newfolder/x.ts', to: 'lib/api/y.ts' })).toMatch(/not in LAYERS/);
    expect(fileCycles([{ from: 'a', to: 'b' }, { from: 'b', to: 'c' }, { from: 'c', to: 'a' }, { from: 'c', to: 'd' }])).toEqual([['a', 'b', 'c']]);
    expect(imports.length).toBeGreaterThan(500);
  });
});
