"""Stand-ins for the Java context a PyFlink operator gets in thread mode, with the API pemja presents
(tests/test_pyflink.py; a child process there imports them too)."""


class JavaOptional:
    def __init__(self, value):
        self.value = value

    def isPresent(self):
        return self.value is not None

    def get(self):
        return self.value


class JavaInfo:
    def __init__(self, properties):
        self.properties = properties

    def getProperty(self, key):
        return JavaOptional(self.properties.get(key))

    def getKeys(self):
        return list(self.properties)

    def toString(self):
        return f"Info({self.properties})"


class JavaRuntimeContext:
    def __init__(self, infos):
        self.infos = infos
        self.asked = []

    def getExternalResourceInfos(self, name):
        self.asked.append(name)
        return set(self.infos) if name == "gpu" else set()


class PyFlinkContext:
    """PyFlink's embedded StreamingRuntimeContext keeps the Java one here."""

    def __init__(self, java):
        self._runtime_context = java


class JavaTaskInfo:
    def __init__(self, allocation):
        self.allocation = allocation

    def getAllocationIDAsString(self):
        return self.allocation


class JavaSubtaskContext(JavaRuntimeContext):
    """A thread-mode subtask's Java context: the TaskManager's infos and its slot's allocation id."""

    def __init__(self, infos, allocation):
        super().__init__(infos)
        self.allocation = allocation

    def getTaskInfo(self):
        return JavaTaskInfo(self.allocation)


class NamedTaskInfo(JavaTaskInfo):
    """Flink 2's TaskInfo: the operator chain's name and the subtask index too."""

    def getTaskName(self):
        return "infer -> Sink: print"

    def getIndexOfThisSubtask(self):
        return 3


class NamedSubtaskContext(JavaSubtaskContext):
    def getTaskInfo(self):
        return NamedTaskInfo(self.allocation)
