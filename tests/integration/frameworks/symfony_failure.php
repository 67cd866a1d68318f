<?php
// A Symfony Messenger 5.4 worker whose handler throws, wired as FrameworkBundle wires it: an
// AMQP transport with one retry, and an AMQP failure transport. Dispatches one message,
// consumes it until it has failed twice, and so leaves it in the failure transport's queue.
// Usage: php symfony_failure.php <amqp url, vhost included> <prefix> <json|php> <invoice>
require_once '/usr/share/php/Symfony/Component/Messenger/autoload.php';
require_once '/usr/share/php/Symfony/Component/EventDispatcher/autoload.php';
require_once '/usr/share/php/Symfony/Component/Serializer/autoload.php';
require_once '/usr/share/php/Symfony/Component/ErrorHandler/autoload.php';
require_once '/usr/share/php/Psr/Container/autoload.php';

use Psr\Container\ContainerInterface;
use Symfony\Component\EventDispatcher\EventDispatcher;
use Symfony\Component\Messenger\Bridge\Amqp\Transport\AmqpTransport;
use Symfony\Component\Messenger\Bridge\Amqp\Transport\Connection;
use Symfony\Component\Messenger\EventListener\AddErrorDetailsStampListener;
use Symfony\Component\Messenger\EventListener\SendFailedMessageForRetryListener;
use Symfony\Component\Messenger\EventListener\SendFailedMessageToFailureTransportListener;
use Symfony\Component\Messenger\EventListener\StopWorkerOnMessageLimitListener;
use Symfony\Component\Messenger\EventListener\StopWorkerOnTimeLimitListener;
use Symfony\Component\Messenger\Handler\HandlersLocator;
use Symfony\Component\Messenger\MessageBus;
use Symfony\Component\Messenger\Middleware\HandleMessageMiddleware;
use Symfony\Component\Messenger\Middleware\SendMessageMiddleware;
use Symfony\Component\Messenger\Retry\MultiplierRetryStrategy;
use Symfony\Component\Messenger\Transport\Sender\SendersLocator;
use Symfony\Component\Messenger\Transport\Serialization\Normalizer\FlattenExceptionNormalizer;
use Symfony\Component\Messenger\Transport\Serialization\PhpSerializer;
use Symfony\Component\Messenger\Transport\Serialization\Serializer;
use Symfony\Component\Messenger\Worker;
use Symfony\Component\Serializer\Encoder\JsonEncoder;
use Symfony\Component\Serializer\Normalizer\ArrayDenormalizer;
use Symfony\Component\Serializer\Normalizer\DateTimeNormalizer;
use Symfony\Component\Serializer\Normalizer\ObjectNormalizer;
use Symfony\Component\Serializer\Serializer as SymfonySerializer;

// The application's classes.
class SendInvoice
{
    public $invoice;
    public function __construct(string $invoice = '') { $this->invoice = $invoice; }
}
class CustomerNotFound extends \RuntimeException {}
class InvoiceFailed extends \RuntimeException {}
function load_customer(string $invoice): void
{
    throw new CustomerNotFound("no customer for invoice $invoice");
}
function send_invoice(SendInvoice $message): void
{
    try {
        load_customer($message->invoice);
    } catch (CustomerNotFound $e) {
        throw new InvoiceFailed("invoice {$message->invoice} could not be sent", 0, $e);
    }
}

final class Services implements ContainerInterface
{
    private $services;
    public function __construct(array $services) { $this->services = $services; }
    public function get(string $id) { return $this->services[$id]; }
    public function has(string $id): bool { return isset($this->services[$id]); }
}

[$script, $dsn, $prefix, $format, $invoice] = $argv;
// FrameworkBundle's `messenger.transport.symfony_serializer`: the app's serializer, which
// normalizes FlattenException with its own normalizer.
$serializer = $format === 'json'
    ? new Serializer(new SymfonySerializer(
        [new FlattenExceptionNormalizer(), new DateTimeNormalizer(), new ArrayDenormalizer(), new ObjectNormalizer()],
        [new JsonEncoder()]
    ))
    : new PhpSerializer();
$transport = function (string $name) use ($dsn, $prefix, $serializer) {
    $connection = Connection::fromDsn("$dsn/$prefix.$name", [
        'exchange' => ['name' => "$prefix.$name", 'type' => 'fanout'],
        'queues' => ["$prefix.$name" => []],
    ]);
    return new AmqpTransport($connection, $serializer);
};
$async = $transport('async');
$failed = $transport('failed');
$async->setup();
$failed->setup();

$handlers = new HandlersLocator([SendInvoice::class => ['send_invoice' => 'send_invoice']]);
$senders = new SendersLocator([SendInvoice::class => ['async']], new Services(['async' => $async]));
$bus = new MessageBus([new SendMessageMiddleware($senders), new HandleMessageMiddleware($handlers)]);

$events = new EventDispatcher();
$events->addSubscriber(new AddErrorDetailsStampListener());
$events->addSubscriber(new SendFailedMessageForRetryListener(
    new Services(['async' => $async]),
    new Services(['async' => new MultiplierRetryStrategy(1, 0)])
));
$events->addSubscriber(new SendFailedMessageToFailureTransportListener(new Services(['async' => $failed])));
$events->addSubscriber(new StopWorkerOnMessageLimitListener(2));
$events->addSubscriber(new StopWorkerOnTimeLimitListener(30));

$bus->dispatch(new SendInvoice($invoice));
(new Worker(['async' => $async], $bus, $events))->run(['sleep' => 10000]);
echo json_encode(['failure_queue' => "$prefix.failed", 'source_queue' => "$prefix.async"]), "\n";
