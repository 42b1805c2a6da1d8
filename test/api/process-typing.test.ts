/**
 * The typing of keyed `process()`: the output type can be given alone (`process<Out>`)
 * without spelling out the state type, the emitted records are still checked against
 * it, and without type arguments the state handles stay typed. The fixture is compiled
 * with the repository's compiler options; its `@ts-expect-error` lines must each meet an
 * error, so a check that stops firing fails here too.
 */
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));
const fixture = fileURLToPath(new URL('./fixtures/process-typing.ts', import.meta.url));

function compile(file: string): string[] {
  const configPath = ts.findConfigFile(root, ts.sys.fileExists, 'tsconfig.json');
  if (!configPath) throw new Error(`no tsconfig.json in ${root}`);
  const parsed = ts.parseJsonConfigFileContent(ts.readConfigFile(configPath, ts.sys.readFile).config, ts.sys, root);
  const program = ts.createProgram([file], { ...parsed.options, noEmit: true });
  return ts
    .getPreEmitDiagnostics(program)
    .map((d) => `${d.file ? `${d.file.fileName}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}: ` : ''}${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`);
}

describe('KeyedStream.process typing', () => {
  it('compiles the output type given alone, with declared state, and keeps the other checks', () => {
    expect(compile(fixture)).toEqual([]);
  }, 60_000);
});
