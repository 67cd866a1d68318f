package org.springframework.amqp.rabbit.listener.adapter;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;

import org.springframework.amqp.rabbit.support.ListenerExecutionFailedException;

// What Spring AMQP does on a listener's failure, with plain JDK classes: the handler method
// is invoked reflectively, its exception unwrapped and wrapped in a
// ListenerExecutionFailedException naming the method; RepublishMessageRecoverer then writes
// x-exception-message (the cause's message) and x-exception-stacktrace (printStackTrace of
// the whole). Prints both, separated by a NUL. Usage: <order id>
public class MessagingMessageListenerAdapter {
    public static void main(String[] args) throws Exception {
        Object listener = Class.forName("com.example.orders.OrderListener").getDeclaredConstructor().newInstance();
        Method method = listener.getClass().getMethod("handle", String.class);
        try {
            invokeHandler(listener, method, args[0]);
        } catch (ListenerExecutionFailedException cause) {
            String message = cause.getCause() != null ? cause.getCause().getMessage() : cause.getMessage();
            StringWriter trace = new StringWriter();
            cause.printStackTrace(new PrintWriter(trace));
            System.out.print(message + "\0" + trace);
        }
    }

    static void invokeHandler(Object listener, Method method, String payload) {
        try {
            method.invoke(listener, payload);
        } catch (InvocationTargetException e) {
            throw new ListenerExecutionFailedException(
                "Listener method '" + method.toGenericString() + "' threw exception", e.getTargetException());
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
    }
}
