// A plain Node.js consumer (npm's amqplib): takes one message from a queue, waiting for it up
// to 20 s, and prints what a Node service would see of it as JSON.
// Usage: node amqplib_take.js <amqp url> <queue>
const amqp = require('amqplib');

async function main() {
  const [url, queue] = process.argv.slice(2);
  const connection = await amqp.connect(url);
  const channel = await connection.createChannel();
  const deadline = Date.now() + 20000;
  let message = false;
  while (!(message = await channel.get(queue, { noAck: true }))) {
    if (Date.now() > deadline) throw new Error(`nothing arrived in ${queue}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const { headers, ...properties } = message.properties;
  const text = (value) => (Buffer.isBuffer(value) ? value.toString('utf8') : value);
  const shown = Object.fromEntries(Object.entries(headers || {}).map(([k, v]) => [k, text(v)]));
  process.stdout.write(JSON.stringify({
    fields: { exchange: message.fields.exchange, routingKey: message.fields.routingKey },
    properties,
    headers: shown,
    body: message.content.toString('utf8'),
  }));
  await connection.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
