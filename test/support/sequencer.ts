/**
 * The order test files start in: longest first, over both projects, so the long poles
 * (the crash soak, the packed-package and tutorial runs) overlap the many short files
 * instead of starting after them and finishing alone. Vitest's own order runs the
 * projects one after the other and, within one, by the durations of the last run.
 *
 * A file's expected duration is that of its last run (vitest's results cache); a file
 * the cache does not know (a fresh checkout) falls back to LONG_POLES, then to none.
 */
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Seconds, roughly, of the slowest files on two cores: the order of a run with no cache. */
const LONG_POLES: Record<string, number> = {
  'test/soak/crash-soak.test.ts': 130,
  'test/package/installed-package.test.ts': 90,
  'test/docs/tutorial.test.ts': 55,
  'test/testing/local-aws/local-rescale.test.ts': 50,
  'test/aws/redelivery-storm.test.ts': 40,
  'test/aws/poison-kill.test.ts': 35,
  'test/aws/savepoint-cli.test.ts': 30,
  'test/cli/checkpoints.test.ts': 30,
  'test/cli/demo.test.ts': 30,
  'test/testing/local-aws/assembly-q5.test.ts': 28,
  'test/docs/api-reference.test.ts': 26,
  'test/infra/synth-cli.test.ts': 26,
};

export class LongPolesFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const root = this.ctx.config.root;
    const expected = (f: TestSpecification): number => {
      const path = relative(root, f.moduleId);
      return this.ctx.cache.getFileTestResults(`${f.project.name}:${path}`)?.duration ?? (LONG_POLES[path] ?? 0) * 1000;
    };
    const ms = new Map(files.map((f) => [f, expected(f)]));
    return [...files].sort((a, b) => ms.get(b)! - ms.get(a)!);
  }
}
