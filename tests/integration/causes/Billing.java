package com.acme.billing;

// A consumer whose lookup fails, wrapped by the listener as frameworks do.
public class Billing {
    static class CustomerNotFoundException extends RuntimeException {
        CustomerNotFoundException(String message) {
            super(message);
        }
    }

    static void load(String id) {
        throw new CustomerNotFoundException("no customer with id " + id);
    }

    static void onMessage(String id) {
        try {
            load(id);
        } catch (RuntimeException e) {
            throw new IllegalStateException("Listener method 'onMessage' threw exception", e);
        }
    }

    public static void main(String[] args) {
        onMessage(args[0]);
    }
}
