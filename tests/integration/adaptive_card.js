// Reads an Adaptive Card (JSON) on standard input and prints, as a JSON array, what the
// Adaptive Cards library itself says of it (npm's `adaptivecards`, found through NODE_PATH):
// unknown elements, missing properties, an unsupported version. Exits 1 when it says anything.
const AC = require("adaptivecards/dist/adaptivecards.js");

let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const card = new AC.AdaptiveCard();
  const context = new AC.SerializationContext();
  card.parse(JSON.parse(input), context);
  const said = [];
  for (let i = 0; i < context.eventCount; i++) said.push(context.getEventAt(i).message);
  for (const event of card.validateProperties().validationEvents) said.push(event.message);
  console.log(JSON.stringify(said));
  process.exit(said.length === 0 ? 0 : 1);
});
