package org.springframework.amqp.rabbit.support;

// Spring AMQP's wrapper of a listener's exception (same package, name and constructor), so
// that the trace the recoverer writes has the shape a real container gives it.
public class ListenerExecutionFailedException extends RuntimeException {
    public ListenerExecutionFailedException(String message, Throwable cause) {
        super(message, cause);
    }
}
