package com.example.orders;

// The application's listener: its customer lookup fails, and it re-throws with the order.
public class OrderListener {
    public static class CustomerNotFoundException extends RuntimeException {
        public CustomerNotFoundException(String message) {
            super(message);
        }
    }

    private void load(String customer) {
        throw new CustomerNotFoundException("no customer with id " + customer);
    }

    public void handle(String order) {
        try {
            load("C-" + order);
        } catch (CustomerNotFoundException e) {
            throw new IllegalStateException("order " + order + " cannot be billed", e);
        }
    }
}
