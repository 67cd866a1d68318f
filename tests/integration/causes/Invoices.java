package com.acme.billing;

import java.io.PrintWriter;
import java.io.StringWriter;

// For each invoice id given, the stack trace of a failed posting as a listener container wraps
// it (what Spring AMQP's RepublishMessageRecoverer puts in x-exception-stacktrace), each
// followed by a line "----".
public class Invoices {
    static class InvoiceNotFoundException extends RuntimeException {
        InvoiceNotFoundException(String message) {
            super(message);
        }
    }

    static void post(String id) {
        throw new InvoiceNotFoundException("no invoice " + id + " in ledger");
    }

    static void onMessage(String id) {
        try {
            post(id);
        } catch (RuntimeException e) {
            throw new IllegalStateException("Listener method 'onMessage' threw exception", e);
        }
    }

    public static void main(String[] args) {
        for (String id : args) {
            try {
                onMessage(id);
            } catch (RuntimeException e) {
                StringWriter trace = new StringWriter();
                e.printStackTrace(new PrintWriter(trace));
                System.out.print(trace);
                System.out.println("----");
            }
        }
    }
}
