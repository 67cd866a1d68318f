// A consumer whose payment lookup fails, wrapped with a cause (Node 16.9+).
function amountOf(order) {
  return order.payment.amount;
}

function handle(id) {
  try {
    return amountOf({ id });
  } catch (e) {
    throw new Error(`order ${id} could not be charged`, { cause: e });
  }
}

handle(process.argv[2]);
