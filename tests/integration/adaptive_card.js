// Reads an Adaptive Card (JSON), or an array of them, on standard input and prints, as a JSON
// array, what the Adaptive Cards library itself says of each (npm's `adaptivecards`, found
// through NODE_PATH): unknown elements, missing properties, an unsupported version — for an
// array, each card's as `[index, message]`. Exits 1 when it says anything.
const AC = require("adaptivecards/dist/adaptivecards.js");

function said(json) {
  const card = new AC.AdaptiveCard();
  const context = new AC.SerializationContext();
  card.parse(json, context);
  const out = [];
  for (let i = 0; i < context.eventCount; i++) out.push(context.getEventAt(i).message);
  for (const event of card.validateProperties().validationEvents) out.push(event.message);
  return out;
}

let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const json = JSON.parse(input);
  const out = Array.isArray(json)
    ? json.flatMap((card, i) => said(card).map((m) => [i, m]))
    : said(json);
  console.log(JSON.stringify(out));
  process.exit(out.length === 0 ? 0 : 1);
});
