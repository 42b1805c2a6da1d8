/**
 * `sluice dev --metrics <file>`: the run's counters as CloudWatch embedded metric format
 * (EMF) lines, serialized by Powertools Metrics under the namespace and names the AWS
 * handlers publish (lib/aws/handler-metrics.ts), so what a user watches locally is what the
 * deployment's dashboard and alarms read. Each line counts what changed since the line
 * before (CloudWatch sums them); a line is written only when something changed.
 *
 * Dimension sets, as on AWS plus the operator where AWS has none:
 * - `service`: eventsAccepted, eventsRejected (invalid or over the bounds), deadLetters,
 *   eventsShed (also per `stream` and `reason`);
 * - `service`, `stage` (its index, as the handlers name it): recordsIn (its first
 *   operator's), recordsOut, lateDropped;
 * - `service`, `stage`, `operator`: lateDropped, per operator that dropped records.
 */
import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { INGEST_METRICS, METRIC_DIMENSIONS, METRICS_NAMESPACE, OPERATOR_METRICS } from '../aws/handler-metrics.ts';
import type { DevStatus } from './status-shape.ts';

/** The dimension of the per-operator late counts (the handlers have none: they count per stage). */
export const OPERATOR_DIMENSION = 'operator';
/** Events load shedding dropped (SourceOptions.shed): per job, and per stream and reason. */
export const SHED_METRIC = 'eventsShed';
export const STREAM_DIMENSION = 'stream';
export const REASON_DIMENSION = 'reason';

type Dimensions = readonly (readonly [string, string])[];
interface Line {
  readonly dimensions: Dimensions;
  readonly values: Record<string, number>;
}

/** The counters of a snapshot, one entry per EMF line (keyed by its dimensions). */
function counters(s: DevStatus): Map<string, Line> {
  const lines = new Map<string, Line>();
  const add = (dimensions: Dimensions, name: string, value: number) => {
    const key = JSON.stringify(dimensions);
    const line = lines.get(key) ?? { dimensions, values: {} };
    line.values[name] = (line.values[name] ?? 0) + value;
    lines.set(key, line);
  };
  add([], INGEST_METRICS.eventsAccepted, s.recordsIngested);
  add([], INGEST_METRICS.eventsRejected, s.rejected.invalid + s.rejected.overBounds);
  add([], OPERATOR_METRICS.deadLetters, s.deadLetters);
  add([], SHED_METRIC, s.shedTotal);
  for (const [stream, byReason] of Object.entries(s.shed)) {
    for (const [reason, n] of Object.entries(byReason)) add([[STREAM_DIMENSION, stream], [REASON_DIMENSION, reason]], SHED_METRIC, n);
  }
  s.stages.forEach((st, i) => {
    const stage = [METRIC_DIMENSIONS.stage, String(i)] as const;
    add([stage], OPERATOR_METRICS.recordsIn, s.recordsIn[st.operators[0]] ?? 0);
    add([stage], OPERATOR_METRICS.recordsOut, st.recordsOut);
    for (const op of st.operators) {
      const late = s.lateDropped[op] ?? 0;
      add([stage], OPERATOR_METRICS.lateDropped, late);
      if (late) add([stage, [OPERATOR_DIMENSION, op]], OPERATOR_METRICS.lateDropped, late);
    }
  });
  return lines;
}

export class MetricsFile {
  private last = new Map<string, Line>();

  /** Starts `path` empty (its folder made when missing). */
  constructor(
    private readonly path: string,
    private readonly service: string,
  ) {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, '');
  }

  /** Appends a line per dimension set whose counters moved since the last write. */
  write(s: DevStatus): void {
    const now = counters(s);
    const out: string[] = [];
    for (const [key, { dimensions, values }] of now) {
      const before = this.last.get(key)?.values ?? {};
      const deltas = Object.entries(values).filter(([name, v]) => v !== (before[name] ?? 0));
      if (!deltas.length) continue;
      const metrics = new Metrics({ namespace: METRICS_NAMESPACE, serviceName: this.service });
      for (const [name, value] of dimensions) metrics.addDimension(name, value);
      for (const [name, v] of deltas) metrics.addMetric(name, MetricUnit.Count, v - (before[name] ?? 0));
      metrics.setTimestamp(s.at);
      out.push(JSON.stringify(metrics.serializeMetrics()));
    }
    this.last = now;
    if (out.length) appendFileSync(this.path, out.join('\n') + '\n');
  }
}
