/**
 * The handlers' metrics as the local-AWS runtime keeps them: counted per metric name
 * (one tally per stage function), not printed as EMF, so the live table and the scaling
 * advice read what CloudWatch would sum on AWS (recordsIn, messages, dead letters, ...).
 */
import type { HandlerMetrics } from '../../aws/handler-metrics.ts';

export class MetricTally implements HandlerMetrics {
  private readonly sums = new Map<string, number>();

  addMetric(name: string, _unit: unknown, value: number): void {
    this.sums.set(name, (this.sums.get(name) ?? 0) + value);
  }

  addDimension(): void {}

  /** Single metrics (the per-partition and per-job incident counts) are counted once, in the stored ones. */
  singleMetric(): Pick<HandlerMetrics, 'addMetric'> & { addDimensions(dimensions: Record<string, string>): void } {
    return { addMetric: () => {}, addDimensions: () => {} };
  }

  publishStoredMetrics(): void {}

  /** The sum of a metric so far (0 before its first). */
  sum(name: string): number {
    return this.sums.get(name) ?? 0;
  }
}
