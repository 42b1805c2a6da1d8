// jobs/orders.ts (examples/order-alerts.ts here): an alert once a customer has spent 100
import { Job, Sinks, valueState, z } from 'sluice';

interface Order { customer: string; amount: number; time: number }

const job = new Job('order-alerts');
job
  .ingest<Order>('orders', { timestamp: (o) => o.time, schema: z.object({ customer: z.string(), amount: z.number(), time: z.number() }) })
  .keyBy((o) => o.customer)
  .process({
    state: { total: valueState<number>() },
    processElement(order, ctx) {
      const total = (ctx.state.total.get() ?? 0) + order.amount;
      ctx.state.total.set(total);
      if (total >= 100) ctx.emit({ customer: ctx.key, total, at: order.time });
    },
  })
  .name('big-spenders')
  .sinkTo(Sinks.stdout(), 'alerts');

export default job;
