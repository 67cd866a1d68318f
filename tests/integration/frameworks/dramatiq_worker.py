"""A real Dramatiq worker whose actor fails with a chained exception: sends one message,
lets the worker try it twice (one retry), and returns once the broker has dead-lettered it
into `<queue>.XQ`. Usage: dramatiq_worker.py <amqp url> <queue> <order id>"""
import json
import sys
import time

import dramatiq
import pika
from dramatiq.brokers.rabbitmq import RabbitmqBroker

url, queue, order_id = sys.argv[1:4]
broker = RabbitmqBroker(url=url)
dramatiq.set_broker(broker)


class TaxError(Exception):
    pass


def tax_of(order):
    return order["vat_id"]


@dramatiq.actor(queue_name=queue, max_retries=1, min_backoff=10, max_backoff=10)
def bill_order(order_id):
    order = {"id": order_id}
    try:
        return tax_of(order)
    except KeyError as e:
        raise TaxError(f"order {order_id} could not be taxed") from e


message = bill_order.send(order_id)
worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=100)
worker.start()
connection = pika.BlockingConnection(pika.URLParameters(url))
channel = connection.channel()
deadline = time.monotonic() + 60
while channel.queue_declare(queue + ".XQ", passive=True).method.message_count < 1:
    if time.monotonic() > deadline:
        sys.exit(f"{queue}.XQ stayed empty")
    time.sleep(0.05)
connection.close()
worker.stop()
broker.close()
print(json.dumps({"message_id": message.message_id, "actor": "bill_order"}))
