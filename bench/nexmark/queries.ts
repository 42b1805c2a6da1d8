/**
 * The benchmarked queries: each job (built from examples/nexmark with validation off:
 * the events are already typed objects in memory), its floor, and the published
 * Flink figure it is compared with (NEXMARK.md section 7.1).
 */
import type { Job } from '../../lib/api/stream.ts';
import q0 from '../../examples/nexmark/q0.ts';
import q1 from '../../examples/nexmark/q1.ts';
import q11 from '../../examples/nexmark/q11.ts';
import q2 from '../../examples/nexmark/q2.ts';
import q3 from '../../examples/nexmark/q3.ts';
import q4 from '../../examples/nexmark/q4.ts';
import q5 from '../../examples/nexmark/q5.ts';
import q7 from '../../examples/nexmark/q7.ts';
import q8 from '../../examples/nexmark/q8.ts';
import { type Floor, q0Floor, q11Floor, q1Floor, q2Floor, q3Floor, q4Floor, q5Floor, q7Floor, q8Floor } from './floors.ts';

export interface BenchQuery {
  readonly name: string;
  readonly title: string;
  /** `parallelism` undefined: the job's own default. */
  readonly job: (parallelism: number | undefined) => Job;
  readonly floor: Floor;
  /** Rows keep input order (NEXMARK.md 5.3): compared in order, as they arrive. */
  readonly ordered: boolean;
  /** Flink runner V1, throughput per core (events/s). */
  readonly flinkPerCore: number;
  /** The target: at least 1/3 of the floor's throughput. */
  readonly floorTarget: boolean;
}

const opts = (parallelism: number | undefined) => ({ parallelism, validate: false });

export const QUERIES: readonly BenchQuery[] = [
  { name: 'q0', title: 'pass-through', job: (p) => q0(opts(p)), floor: q0Floor, ordered: true, flinkPerCore: 155_000, floorTarget: false },
  { name: 'q1', title: 'currency conversion (map)', job: (p) => q1(opts(p)), floor: q1Floor, ordered: true, flinkPerCore: 157_900, floorTarget: true },
  { name: 'q2', title: 'selection (filter, ~0.8 %)', job: (p) => q2(opts(p)), floor: q2Floor, ordered: true, flinkPerCore: 175_200, floorTarget: true },
  { name: 'q3', title: 'local item suggestion (unbounded join)', job: (p) => q3(opts(p)), floor: q3Floor, ordered: false, flinkPerCore: 152_100, floorTarget: false },
  { name: 'q4', title: 'average price per category (join, max, avg)', job: (p) => q4(opts(p)), floor: q4Floor, ordered: false, flinkPerCore: 34_300, floorTarget: false },
  { name: 'q5', title: 'hot items (sliding 10 s / 2 s count, max)', job: (p) => q5(opts(p)), floor: q5Floor(), ordered: false, flinkPerCore: 22_100, floorTarget: true },
  { name: 'q7', title: 'highest bid (tumbling 10 s max)', job: (p) => q7(opts(p)), floor: q7Floor(), ordered: false, flinkPerCore: 12_300, floorTarget: true },
  { name: 'q8', title: 'new users (tumbling 10 s window join)', job: (p) => q8(opts(p)), floor: q8Floor(), ordered: false, flinkPerCore: 146_100, floorTarget: true },
  { name: 'q11', title: 'user sessions (session windows, 10 s gap)', job: (p) => q11(opts(p)), floor: q11Floor(), ordered: false, flinkPerCore: 39_700, floorTarget: false },
];
