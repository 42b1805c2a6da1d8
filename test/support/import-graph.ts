/**
 * The project's import graph, read with TypeScript's own pre-processor (type-only imports
 * included: a type import ties two layers as firmly as a value import does), and the
 * layering it must follow.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

/** Where a file sits in the layering: its folder under lib/, or a top-level folder. */
export type Layer = string;

/**
 * The layers, lowest first. A file may import its own layer and any layer before it;
 * layers in one group of the same rank may not import each other at all.
 */
export const LAYERS: readonly (readonly Layer[])[] = [
  ['util', 'errors'],
  ['api'],
  ['graph'],
  ['transport'],
  ['state'],
  // The checkpoint protocol, snapshot format and storage interfaces use neither the
  // operators nor the runtime; the runtime takes part in the protocol (aligns barriers,
  // writes its snapshot), so both sit below it, side by side.
  ['operators', 'checkpoint'],
  ['runtime'],
  ['nexmark'],
  ['local', 'aws'],
  ['testing'],
  // The package's main entry point; the examples are written against it, as a user's job is.
  ['index'],
  ['examples'],
  ['infra'],
  ['cli', 'functions'],
];

/** The folders the layering covers. */
export const SOURCE_DIRS: readonly string[] = ['lib', 'infra', 'functions', 'examples'];

const RANK = new Map(LAYERS.flatMap((group, rank) => group.map((layer) => [layer, rank] as const)));

export interface Import {
  readonly from: string;
  readonly to: string;
}

/** The layer of a repository-relative path. */
export function layerOf(path: string): Layer {
  const parts = path.split('/');
  if (parts[0] !== 'lib') return parts[0];
  if (parts.length === 2) return parts[1].replace(/\.ts$/, '');
  return parts[1];
}

/** Why an import breaks the layering, or undefined when it keeps it. */
export function layeringViolation(i: Import): string | undefined {
  const a = layerOf(i.from);
  const b = layerOf(i.to);
  if (a === b) return undefined;
  const ra = RANK.get(a);
  const rb = RANK.get(b);
  if (ra === undefined) return `${i.from}: its layer "${a}" is not in LAYERS`;
  if (rb === undefined) return `${i.to}: its layer "${b}" is not in LAYERS`;
  if (rb < ra) return undefined;
  return rb === ra ? `${a} and ${b} are side by side and may not import each other` : `${a} imports ${b}, which is above it`;
}

/** The project's TypeScript sources under `dirs`, absolute paths, sorted. */
export function sourceFiles(root: string, dirs: readonly string[] = SOURCE_DIRS): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(p);
    }
  };
  dirs.forEach((d) => walk(join(root, d)));
  return out.sort();
}

/** Every relative import between the project's source files, as repository-relative paths. */
export function readImports(root: string, dirs: readonly string[] = SOURCE_DIRS): Import[] {
  const imports: Import[] = [];
  for (const file of sourceFiles(root, dirs)) {
    const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
    for (const { fileName } of importedFiles) {
      if (!fileName.startsWith('.')) continue;
      imports.push({ from: relative(root, file), to: relative(root, resolve(dirname(file), fileName)) });
    }
  }
  return imports;
}

/** The import cycles among files: each strongly connected component of more than one file (Tarjan). */
export function fileCycles(imports: readonly Import[]): string[][] {
  const next = new Map<string, string[]>();
  for (const { from, to } of imports) {
    if (!next.has(from)) next.set(from, []);
    next.get(from)!.push(to);
  }
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  let counter = 0;
  const visit = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1) cycles.push(component.sort());
    }
  };
  for (const v of [...next.keys()].sort()) if (!index.has(v)) visit(v);
  return cycles.sort((x, y) => x[0].localeCompare(y[0]));
}
